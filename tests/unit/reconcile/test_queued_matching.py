"""Per-pass work does not grow with the jobs a group lists when Gitea's answer did not
change: which queued jobs a group can take, and whether the answer lists a job of unknown
repository, are worked out once per answer (and offered label set), however many passes,
status writes and enrolments ask (work counted, never timed)."""

from __future__ import annotations

import gc

from gitea_runner_operator.api.gitea import ActionJob
from gitea_runner_operator.api.observation import Observation
from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.reconcile import scaling
from gitea_runner_operator.reconcile.capacity import family_changes
from gitea_runner_operator.reconcile.capacity.accounting import Answer
from gitea_runner_operator.reconcile.capacity.ledger import Ledger
from gitea_runner_operator.reconcile.scaling import queued_matching
from tests.support.claims import group, job

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
    gc.collect()  # what earlier tests left in reference cycles is not this test's
    before = len(queued_matching)
    for _ in range(20):
        queued_matching(answer(10), LINUX)
    gc.collect()
    assert len(queued_matching) == before


def test_the_ledger_walks_an_answer_for_unknown_repositories_once(monkeypatch):
    walked: list[int] = []
    real = family_changes.job_repository

    def counting(j):
        walked.append(1)
        return real(j)

    monkeypatch.setattr(family_changes, "job_repository", counting)
    ledger = Ledger(min_interval=0.0)
    url = "https://g.test"
    jobs = [job(i, "acme/app") for i in range(1, 2001)]
    peer = group("r/app", Scope.REPO, "acme", "app")
    ledger.report(url, peer, Answer(peer.key, 1.0, [job(9999, "acme/app")]))
    first = group("o/acme", Scope.ORG, "acme", not_busy=0)
    ledger.report(url, first, Answer(first.key, 1.0, jobs))
    ledger.share(first.key)  # the family is worked out
    walked.clear()
    for n in range(1, 51):  # passes of the same answer while its runners start
        moved = group("o/acme", Scope.ORG, "acme", not_busy=n)
        ledger.report(url, moved, Answer(moved.key, 1.0, jobs))
    assert len(walked) <= len(jobs)
