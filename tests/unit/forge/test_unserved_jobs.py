"""Queued jobs no group of their Gitea could run are counted where they are listed, not kept
(forge/unserved.py): a tenant's Gitea listing thousands of jobs with labels nobody offers
costs a count per label set, not 2 KiB per job in every observation.

Before: every listed job was kept (the hostile benchmark's 40 URLs of 4,000 such jobs kept
32,000 ActionJobs, 66 MiB, mid-attack)."""

from __future__ import annotations

import json

from aioresponses import aioresponses

from gitea_runner_operator.api.gitea import MAX_UNSERVED_SETS
from gitea_runner_operator.api.runnergroup import Scope, parse_spec
from gitea_runner_operator.kit.tenant_budget import MIB, TenantBudget
from gitea_runner_operator.poll.observer import Observer
from gitea_runner_operator.reconcile.capacity.accounting import Claimant
from gitea_runner_operator.reconcile.capacity.ledger import Ledger
from tests.support.gitea_answers import ORG_SPEC, QUEUED, RUNNERS, FakeSecrets, is_gitea

OFFERED = frozenset({"ubuntu-latest", "app-infra"})  # ORG_SPEC's labels


def _page(labels_of: dict[int, list[str]]) -> bytes:
    jobs = [
        {"id": i, "status": "queued", "labels": labels,
         "url": f"http://g.test/api/v1/repos/acme/app/actions/jobs/{i}"}
        for i, labels in labels_of.items()
    ]  # fmt: skip
    return json.dumps({"jobs": jobs, "total_count": len(jobs)}).encode()


async def _observe(sessions, labels_of: dict[int, list[str]], offered, budget=None):
    observer = Observer(
        FakeSecrets({"team": "t"}),  # type: ignore[arg-type]
        sessions,
        offered=offered,
        tenant_budget=budget,
    )
    with aioresponses() as mock:
        is_gitea(mock)
        mock.get("http://g.test/api/v1/orgs/acme", payload={"id": 1}, repeat=True)
        mock.get(RUNNERS, payload={"runners": [], "total_count": 0}, repeat=True)
        mock.get(QUEUED, body=_page(labels_of), repeat=True)
        snapshot, _ = await observer.observe("team", parse_spec(ORG_SPEC))
    await observer.drop(set())
    assert snapshot.problem is None and snapshot.observation is not None
    return snapshot.observation


async def test_a_page_of_jobs_none_of_the_urls_groups_can_run_keeps_nothing_but_a_count(
    sessions,
):
    # 50 jobs, each with a label of its own that no group of g.test offers.
    labels_of = {i: [f"nobody-{i}"] for i in range(1, 51)}
    budget = TenantBudget(64 * MIB)
    observation = await _observe(sessions, labels_of, lambda url: OFFERED, budget)
    assert observation.queued == ()
    assert observation.queued_complete
    assert observation.unserved_jobs == 50
    assert len(observation.unserved) == MAX_UNSERVED_SETS  # the first met: the oldest
    assert observation.unserved_other == 50 - MAX_UNSERVED_SETS
    assert observation.unserved[0].labels == ("nobody-1",)
    assert observation.unserved[0].example.id == 1


async def test_jobs_some_group_can_run_are_kept_and_unknown_offers_keep_everything(sessions):
    labels_of = {1: ["ubuntu-latest"], 2: ["typo"], 3: ["typo"], 4: ["ubuntu-latest", "x"]}
    observation = await _observe(sessions, labels_of, lambda url: OFFERED)
    assert [j.id for j in observation.queued] == [1]
    ((typo, two), (x, one)) = sorted((u.labels, u.count) for u in observation.unserved)
    assert (typo, two, x, one) == (("typo",), 2, ("ubuntu-latest", "x"), 1)
    # The ledger knows no group of that Gitea yet: every job is kept, as before.
    observation = await _observe(sessions, labels_of, lambda url: None)
    assert [j.id for j in observation.queued] == [1, 2, 3, 4]
    assert observation.unserved_jobs == 0


def test_the_ledger_offers_the_union_of_its_groups_labels_per_gitea_url():
    ledger = Ledger()

    def member(key: str, url: str, labels: set[str]) -> None:
        c = Claimant(key, Scope.ORG, "acme", None, frozenset(labels), not_busy=0, spare=0)
        ledger.report(url, c, None)

    assert ledger.offered("https://g.test") is None
    member("a/one", "https://g.test", {"linux"})
    member("b/two", "https://g.test", {"gpu", "linux"})
    member("c/three", "https://other.test", {"arm"})
    assert ledger.offered("HTTPS://g.test/") == {"linux", "gpu"}
    member("b/two", "https://g.test", {"windows"})  # its offer changed
    assert ledger.offered("https://g.test") == {"linux", "windows"}
    ledger.remove("a/one")
    assert ledger.offered("https://g.test") == {"windows"}


def test_a_listing_holds_an_example_for_the_first_label_sets_only():
    """4,000 queued jobs, each with a label of its own: the tally holds 20 examples, not one
    per job (a first version kept an example per set: every job of such a queue)."""
    from gitea_runner_operator.api.gitea import ActionJob
    from gitea_runner_operator.forge.unserved import UnservedTally

    tally = UnservedTally(OFFERED)
    jobs = [ActionJob(id=i, status="queued", labels=(f"lbl-{i}",)) for i in range(1, 4001)]
    assert not any(tally.keeps(job) for job in jobs)
    unserved, other = tally.result()
    assert len(unserved) == MAX_UNSERVED_SETS and other == 4000 - MAX_UNSERVED_SETS
    assert {u.example.id for u in unserved} == set(range(1, MAX_UNSERVED_SETS + 1))
    assert len(tally._examples) == MAX_UNSERVED_SETS


def test_jobs_that_are_only_counted_get_no_model_and_the_counts_are_the_same():
    """The raw items are screened before validation: of 4,000 queued jobs with labels no
    group offers, only the examples of the first 20 sets are made into models, and the
    counts are those of validating every job."""
    from gitea_runner_operator.api.gitea import ActionJob
    from gitea_runner_operator.forge.unserved import UnservedTally

    raw = [{"id": i, "status": "queued", "labels": [f"lbl-{i % 30}"]} for i in range(1, 4001)]
    raw.append({"id": 9999, "status": "queued", "labels": ["ubuntu-latest"]})
    screened, every = UnservedTally(OFFERED), UnservedTally(OFFERED)
    passed, kept = 0, []
    for at in range(0, len(raw), 50):  # page by page, as a listing is read (oldest first)
        page = [item for item in raw[at : at + 50] if screened.screen(item)]
        passed += len(page)
        kept += [j for j in map(ActionJob.model_validate, page) if screened.keeps(j)]
    assert [j.id for j in kept] == [9999]
    assert passed <= 51  # the first page (where the examples are), and the kept job
    assert not any(every.keeps(ActionJob.model_validate(item)) for item in raw[:-1])
    assert screened.result() == every.result()
    assert screened.dropped == every.dropped == 4000
