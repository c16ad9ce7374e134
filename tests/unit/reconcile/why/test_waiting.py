"""Why a team's matching jobs are not running yet: the reasons status and metrics show."""

from __future__ import annotations

import datetime as dt

import pytest

from gitea_runner_operator.api.gitea import ActionJob
from gitea_runner_operator.api.observation import Observation, Snapshot
from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.reconcile.capacity.accounting import Answer, Claimant
from gitea_runner_operator.reconcile.capacity.ledger import Ledger
from gitea_runner_operator.reconcile.why.waiting import HeldBack, explain_waiting, peers_serving
from tests.support.builders import queued_job
from tests.support.fake_cluster import KEY, FakeCluster, make

QUEUED = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
QUOTA = HeldBack("JobCreateRefused", "RunnersHealthy")


def job(i: int, labels: tuple[str, ...] = ("ubuntu-latest",)) -> ActionJob:
    return queued_job(i, "acme/widgets", labels, created_at=QUEUED + dt.timedelta(minutes=i))


@pytest.mark.parametrize(
    ("queued", "covered", "room", "held", "starting", "capacity", "held_back"),
    [
        (3, 3, 0, None, 3, 0, 0),  # a runner on its way for each
        (5, 2, 1, None, 3, 2, 0),  # two covered, one more created, two wait for a slot
        (4, 1, 3, QUOTA, 1, 0, 3),  # may not create: held back, not "at capacity"
        (0, 2, 3, None, 0, 0, 0),
        (2, 5, 0, QUOTA, 2, 0, 0),  # idle runners cover them all: nothing is held back
    ],
)
def test_each_own_job_is_counted_under_one_reason(
    queued, covered, room, held, starting, capacity, held_back
):
    w = explain_waiting(
        own=[job(i) for i in range(1, queued + 1)], by_peer={}, covered=covered, room=room,
        held=held,
    )  # fmt: skip
    assert (w.starting_runner, w.at_capacity, w.held_back) == (starting, capacity, held_back)
    assert w.starting_runner + w.at_capacity + w.held_back == queued


def test_status_names_the_condition_that_holds_jobs_back_and_the_oldest_queue_time():
    w = explain_waiting(own=[job(2), job(1)], by_peer={}, covered=0, room=0, held=QUOTA)
    assert w.status()["heldBack"] == {
        "count": 2,
        "reason": "JobCreateRefused",
        "condition": "RunnersHealthy",
    }
    assert w.oldest_iso() == "2026-01-01T00:01:00Z"
    nothing = explain_waiting(own=[], by_peer={}, covered=0, room=0, held=QUOTA)
    assert nothing.status()["heldBack"] == {"count": 0, "reason": "", "condition": ""}
    assert nothing.oldest_iso() is None


def test_jobs_a_peer_of_the_family_serves_name_that_peer():
    ledger = Ledger(min_interval=0)
    org = Claimant("team-a/org", Scope.ORG, "acme", None, frozenset({"ubuntu-latest"}),
                   not_busy=0, spare=5)  # fmt: skip
    app = Claimant("team-b/app", Scope.REPO, "acme", "widgets", frozenset({"ubuntu-latest"}),
                   not_busy=0, spare=1)  # fmt: skip
    jobs = [job(1), job(2), job(3)]
    ledger.report("https://gitea.example.com", org, Answer(org.key, 1.0, jobs))
    ledger.report("https://gitea.example.com", app, Answer(app.key, 1.0, jobs))
    assert ledger.share(org.key) is not None
    holders = ledger.holders(org.key)
    by_peer = peers_serving(jobs, holders, org.key)
    assert by_peer == {"team-b/app": 1}  # the repo group has room for one: most specific
    own = [j for j in jobs if holders.get(j.id, org.key) == org.key]
    w = explain_waiting(own=own, by_peer=by_peer, covered=0, room=5, held=None, listed=jobs)
    assert w.status()["servedByPeer"] == {"count": 1, "groups": ["team-b/app"]}
    assert w.starting_runner == 2
    roomier = Claimant(app.key, app.scope, app.org, app.repo, app.offered, not_busy=0, spare=3)
    ledger.report("https://gitea.example.com", roomier, Answer(app.key, 2.0, jobs))
    ledger.share(app.key)
    assert peers_serving(jobs, ledger.holders(org.key), org.key) == {"team-b/app": 3}


def snap(n: int) -> Snapshot:
    return Snapshot(
        1.0,
        "2026-01-01T00:00:10Z",
        Observation(queued=tuple(job(i) for i in range(1, n + 1)), runners=()),
    )


async def test_a_group_at_max_active_runners_shows_its_jobs_at_capacity():
    cluster = FakeCluster()
    reconciler, _, _ = make(cluster, snap(5))  # maxActiveRunners: 3
    await reconciler.reconcile(KEY)
    assert cluster.status is not None
    assert cluster.status["waiting"]["startingRunner"] == 3
    assert cluster.status["waiting"]["atCapacity"] == 2
    assert cluster.status["oldestQueuedTime"] == "2026-01-01T00:01:00Z"
    text = reconciler._metrics.render().decode()
    assert (
        'gitea_runner_operator_waiting_jobs{namespace="team-a",reason="at_capacity",'
        'runnergroup="ci"} 2.0'
    ) in text


async def test_a_quota_refused_group_shows_its_jobs_held_back_with_the_reason():
    cluster = FakeCluster()
    cluster.refuse = (
        "jobs.batch is forbidden: exceeded quota: runners, requested: count/jobs.batch=1"
    )
    reconciler, _, _ = make(cluster, snap(2))
    await reconciler.reconcile(KEY)
    assert cluster.status is not None
    assert cluster.status["waiting"]["heldBack"] == {
        "count": 2,
        "reason": "JobCreateRefused",
        "condition": "RunnersHealthy",
    }


def test_the_crd_keeps_every_field_written_and_kubectl_shows_the_oldest_waiting_job():
    import yaml

    from tests.support import REPO_ROOT as REPO

    crd = yaml.safe_load((REPO / "manifests" / "crd.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    written = explain_waiting(own=[job(1)], by_peer={"a/b": 1}, covered=0, room=0, held=QUOTA)
    schema = status["waiting"]["properties"]
    assert set(schema) == set(written.status())  # anything else would be pruned
    for key, value in written.status().items():
        if isinstance(value, dict):
            assert set(schema[key]["properties"]) == set(value)
    assert status["oldestQueuedTime"]["format"] == "date-time"
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert columns["Oldest waiting"]["jsonPath"] == ".status.oldestQueuedTime"
    assert columns["Oldest waiting"]["type"] == "date"


@pytest.mark.parametrize(
    ("spec_change", "reason"),
    [({"labels": ["bad:label"]}, "InvalidSpec"), ({"template": {"spec": {"hostNetwork": True}}},
                                                  "TemplateNotAllowed")],
)  # fmt: skip
async def test_a_group_refused_by_its_spec_or_the_policy_holds_its_last_known_jobs_back(
    spec_change, reason
):
    from tests.support.builders import VALID

    cluster = FakeCluster()
    cluster.status = {"queuedJobs": 4, "oldestQueuedTime": "2026-01-01T00:01:00Z"}
    reconciler, _, _ = make(cluster, snap(4), spec={**VALID, **spec_change})
    await reconciler.reconcile(KEY)
    assert cluster.status["waiting"]["heldBack"] == {
        "count": 4,
        "reason": reason,
        "condition": "Ready",
    }
    # Not in the merge patch: the API server keeps the last one seen.
    assert cluster.status["oldestQueuedTime"] == "2026-01-01T00:01:00Z"
