"""Per-pass work does not grow with the jobs a group lists when Gitea's answer did not
change: which queued jobs a group can take is worked out once per answer and offered label
set, however many passes, status writes and enrolments ask (work counted, never timed)."""

from __future__ import annotations

import gc

from gitea_runner_operator.api.gitea import ActionJob
from gitea_runner_operator.api.observation import Observation
from gitea_runner_operator.reconcile import scaling
from gitea_runner_operator.reconcile.scaling import queued_matching

LINUX = frozenset({"linux"})


def answer(n: int) -> Observation:
    queued = tuple(
        ActionJob(id=i, labels=("linux",) if i % 2 else ("gpu",), status="queued")
        for i in range(1, n + 1)
    )
    return Observation(queued=queued, runners=())


def counting(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = scaling.labels_fit

    def fit(labels, offered):
        calls.append(1)
        return real(labels, offered)

    monkeypatch.setattr(scaling, "labels_fit", fit)
    return calls


def test_the_same_answer_is_walked_once_however_often_it_is_asked(monkeypatch):
    calls = counting(monkeypatch)
    observation = answer(4000)
    for _ in range(50):  # passes triggered by Pod events, the status, the enrolment
        matching = queued_matching(observation, LINUX)
    assert len(matching) == 2000
    assert len(calls) == 4000


def test_a_new_answer_or_a_new_label_set_is_worked_out_again(monkeypatch):
    calls = counting(monkeypatch)
    first, second = answer(100), answer(100)
    assert len(queued_matching(first, LINUX)) == 50
    assert len(queued_matching(second, LINUX)) == 50  # equal, but Gitea answered again
    assert len(queued_matching(second, frozenset({"linux", "gpu"}))) == 100  # a spec change
    assert len(calls) == 300


def test_what_is_kept_goes_with_the_answer():
    before = len(queued_matching)
    for _ in range(20):
        queued_matching(answer(10), LINUX)
    gc.collect()
    assert len(queued_matching) == before
