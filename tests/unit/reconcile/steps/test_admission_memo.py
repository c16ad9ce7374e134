"""A group's spec is parsed and admitted once per uid and generation, not on every pass: a
tenant whose own runner Pods change at will triggers passes, and each re-parse of a 1 MiB
spec cost 28-48 ms of the loop (issue 36, row 11)."""

from __future__ import annotations

import pytest

from gitea_runner_operator.api.template_policy import TemplatePolicy
from gitea_runner_operator.reconcile.steps import admission
from gitea_runner_operator.reconcile.steps.admission import Admissions
from tests.support.builders import spec_with

KEY = "team-a/ci"


def meta(uid: str = "u1", generation: int = 1) -> dict[str, object]:
    return {"name": "ci", "namespace": "team-a", "uid": uid, "generation": generation}


@pytest.fixture
def parses(monkeypatch):
    calls: list[object] = []
    real = admission.parse_spec

    def counting(raw):
        calls.append(raw)
        return real(raw)

    monkeypatch.setattr(admission, "parse_spec", counting)
    return calls


def test_a_spec_is_parsed_once_per_uid_and_generation(parses):
    admissions = Admissions(TemplatePolicy(), own_namespace=None)
    raw = spec_with()
    first = admissions.admit(KEY, meta(), raw)
    for _ in range(50):
        assert admissions.admit(KEY, meta(), dict(raw)) is first
    assert len(parses) == 1
    admissions.admit(KEY, meta(generation=2), raw)
    admissions.admit(KEY, meta(uid="u2", generation=2), raw)
    assert len(parses) == 3


def test_an_invalid_spec_and_a_refusal_are_remembered_too(parses):
    admissions = Admissions(TemplatePolicy(), own_namespace="team-a")
    refused = admissions.admit(KEY, meta(), spec_with())
    assert refused.spec is not None and refused.refusal is not None
    assert refused.refusal.reason == "NamespaceNotAllowed"
    invalid = admissions.admit("team-b/ci", meta(), spec_with(maxActiveRunners=0))
    assert invalid.spec is None and invalid.invalid is not None
    assert "spec.maxActiveRunners" in invalid.invalid.message
    admissions.admit(KEY, meta(), spec_with())
    admissions.admit("team-b/ci", meta(), spec_with(maxActiveRunners=0))
    assert len(parses) == 2


def test_one_entry_per_group_dropped_with_the_group(parses):
    admissions = Admissions(TemplatePolicy(), own_namespace=None)
    for generation in range(1, 100):
        admissions.admit(KEY, meta(generation=generation), spec_with())
    assert len(admissions) == 1
    admissions.forget(KEY)
    assert len(admissions) == 0


def test_without_a_generation_nothing_is_remembered(parses):
    admissions = Admissions(TemplatePolicy(), own_namespace=None)
    for _ in range(3):
        admissions.admit(KEY, {"uid": "u1"}, spec_with())
    assert len(parses) == 3


async def test_the_reconciler_parses_an_unchanged_spec_once_over_many_passes(monkeypatch):
    from gitea_runner_operator.api.runnergroup import RunnerGroupSpec
    from tests.support.fake_cluster import KEY as FAKE_KEY
    from tests.support.fake_cluster import FakeCluster, make, snapshot

    validated: list[object] = []
    real = RunnerGroupSpec.model_validate.__func__  # type: ignore[attr-defined]

    def counting(cls, raw, *args, **kwargs):
        validated.append(raw)
        return real(cls, raw, *args, **kwargs)

    monkeypatch.setattr(RunnerGroupSpec, "model_validate", classmethod(counting))
    cluster = FakeCluster()
    reconciler, _, cache = make(cluster, snapshot(queued=1))
    for _ in range(20):
        await reconciler.reconcile(FAKE_KEY)
    assert len(validated) == 1
    cache.spec = spec_with(maxActiveRunners=0)  # a new generation
    await reconciler.reconcile(FAKE_KEY)
    assert len(validated) == 2
