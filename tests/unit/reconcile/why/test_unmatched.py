"""Jobs no group will ever serve: what the platform team sees (the cause, the nearest offered
label, an example job, a bounded metric) and how often it is told."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest
from structlog.testing import capture_logs

from gitea_runner_operator.api.gitea import ActionJob
from gitea_runner_operator.api.observation import Observation, Snapshot
from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.metrics import Metrics
from gitea_runner_operator.metrics.why import WhyMetrics
from gitea_runner_operator.reconcile.capacity.accounting import Answer, Claimant
from gitea_runner_operator.reconcile.capacity.ledger import Ledger
from gitea_runner_operator.reconcile.why.unmatched import (
    OTHER,
    Cause,
    Offer,
    Sighting,
    buckets,
    describe,
    find_unmatched,
    nearest_label,
)
from gitea_runner_operator.reconcile.why.unmatched_book import (
    MAX_SETS_WEIGHED,
    UnmatchedBook,
    Verdict,
    publish,
)
from tests.support.builders import queued_job
from tests.support.fake_cluster import KEY, Clock, FakeCluster, make

URL = "https://g.test"
QUEUED = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def job(i: int, labels: tuple[str, ...] = ("ubuntu-latest",), repo: str = "acme/app") -> ActionJob:
    return queued_job(i, repo, labels, url=URL, created_at=QUEUED + dt.timedelta(minutes=i))


def claimant(key: str, scope: Scope, org: str | None = None, repo: str | None = None,
             labels: tuple[str, ...] = ("ubuntu-latest",)) -> Claimant:  # fmt: skip
    return Claimant(key, scope, org, repo, frozenset(labels), not_busy=0, spare=0)


ORG = claimant("team-a/org", Scope.ORG, "acme")
GPU = claimant("team-b/gpu", Scope.REPO, "acme", "ml", labels=("gpu",))


def unmatched(jobs: list[ActionJob], groups: list[Claimant], observer: str = "team-a/org"):
    return find_unmatched([Sighting(URL, observer, jobs)], [Offer(URL, c) for c in groups])


@pytest.mark.parametrize(
    ("labels", "repo", "cause", "nearest", "offered_by"),
    [
        (("ubuntu-latest",), "acme/app", None, (), ()),  # served: not reported
        (("ubuntu-lastest",), "acme/app", Cause.LABELS, (("ubuntu-lastest", "ubuntu-latest"),), ()),
        (("windows",), "acme/app", Cause.LABELS, (), ()),  # nothing close: no guess
        (("gpu",), "acme/app", Cause.SCOPE, (), ("team-b/gpu",)),  # offered, scope misses it
        (("gpu",), "acme/ml", None, (), ()),
        (("gpu", "ubuntu-latest"), "acme/ml", Cause.LABELS, (), ()),  # no one group offers both
    ],
)
def test_a_job_is_unmatched_when_no_group_both_covers_it_and_offers_its_labels(
    labels, repo, cause, nearest, offered_by
):
    found = unmatched([job(1, labels, repo)], [ORG, GPU])
    if cause is None:
        assert found == []
        return
    (s,) = found
    assert (s.cause, s.nearest, s.offered_by) == (cause, nearest, offered_by)
    assert s.labels == tuple(sorted(labels)) and s.observers == {"team-a/org"}


def test_a_job_listed_by_two_groups_counts_once_and_both_are_observers():
    sightings = [Sighting(URL, "team-a/org", [job(1, ("typo",))]),
                 Sighting(URL, "team-c/app", [job(1, ("typo",))])]  # fmt: skip
    (s,) = find_unmatched(sightings, [Offer(URL, ORG)])
    assert len(s.jobs) == 1 and s.observers == {"team-a/org", "team-c/app"}


def test_groups_of_another_gitea_do_not_serve_a_job():
    (s,) = find_unmatched([Sighting(URL, "x/y", [job(1)])], [Offer("https://other", ORG)])
    assert s.cause is Cause.LABELS


def test_the_event_names_the_labels_the_nearest_offered_label_and_an_example_job():
    (s,) = unmatched([job(7, ("ubuntu-lastest",)), job(8, ("ubuntu-lastest",))], [ORG])
    message = describe(s, "team-a/org")
    assert "2 queued job(s) with runs-on [ubuntu-lastest]" in message
    assert "did you mean 'ubuntu-latest'?" in message
    assert f"{URL}/api/v1/repos/acme/app/actions/jobs/7" in message
    (s,) = unmatched([job(1, ("gpu",))], [ORG, GPU], observer="team-b/app")
    assert "offered by team-b/gpu, whose scope does not cover" in describe(s, "team-b/app")


def test_nearest_label_is_a_close_spelling_only():
    assert nearest_label("ubuntu-lastest", ["ubuntu-latest", "ubuntu-22.04"]) == "ubuntu-latest"
    assert nearest_label("macos", ["ubuntu-latest"]) is None
    assert nearest_label("gro-linx", ["gro-linux"]) == "gro-linux"
    # a shared prefix is not a typo: a wrong hint sends the user after the wrong fix
    assert nearest_label("gro-gpu", ["gro-linux"]) is None


def test_the_metric_keeps_the_largest_label_sets_and_adds_up_the_rest_as_other():
    jobs = [job(i, (f"label-{i % 5}",)) for i in range(1, 31)]
    series = buckets(unmatched(jobs, [ORG]), cap=3)
    assert len(series) == 4
    assert series[(URL, OTHER)].count == 12  # two sets of six
    assert sum(b.count for b in series.values()) == 30
    assert series[(URL, "label-1")].oldest == QUEUED + dt.timedelta(minutes=1)


class Book:
    """An unmatched-jobs book and the ledger whose book of members it reads: groups report
    through the ledger and the book is told what changed, as the claims step does."""

    def __init__(self, **options: Any) -> None:
        self.ledger = Ledger()
        self.book = UnmatchedBook(self.ledger.members, **options)
        self._asked = 0.0

    def report(self, url: str, c: Claimant, jobs: list[ActionJob] | None) -> None:
        before = self.ledger.members.get(c.key)
        self._asked += 1.0  # each report is a new answer
        answer = Answer(c.key, self._asked, tuple(jobs)) if jobs is not None else None
        self.ledger.report(url, c, answer)
        self.book.changed(before, self.ledger.members.get(c.key))

    def remove(self, key: str) -> None:
        self.book.changed(self.ledger.remove(key), None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.book, name)


def test_a_label_set_is_warned_about_once_an_hour_with_a_bounded_memo():
    clock = Clock()
    book = Book(clock=clock, min_interval=0, memo_size=2)
    book.report(URL, ORG, [job(1, ("typo",))])
    verdict = book.evaluate(URL)
    assert verdict is not None and [s.labels for s in verdict.warn] == [("typo",)]
    book.report(URL, ORG, [job(1, ("typo",)), job(2, ("typo",))])
    verdict = book.evaluate(URL)
    assert verdict is not None and len(verdict.sets[0].jobs) == 2 and verdict.warn == ()
    clock.now += 3600
    book.report(URL, ORG, [job(3, ("typo",))])
    verdict = book.evaluate(URL)
    assert verdict is not None and len(verdict.warn) == 1
    for i in range(10):  # many invented label sets: the memo keeps only the newest two
        book.report(URL, ORG, [job(10 + i, (f"made-up-{i}",))])
        book.evaluate(URL)
    assert len(book._warned) == 2


def test_nothing_is_recomputed_while_no_group_of_that_gitea_reported_anything_new():
    book = Book(min_interval=0)
    book.report(URL, ORG, [job(1, ("typo",))])
    assert book.evaluate(URL) is not None
    book.report(URL, ORG, [job(1, ("typo",))])
    assert book.evaluate(URL) is None


def test_a_skipped_evaluation_is_due_again_at_the_end_of_the_interval():
    """Reconciles are queued only when something changed: an evaluation skipped for
    min_interval says when it is due, so the background evaluations come back for it
    (unmatched_flight.py) instead of a typo label waiting for the resync."""
    now = [100.0]
    book = Book(min_interval=5.0, clock=lambda: now[0])
    other = claimant("team-b/app", Scope.REPO, "acme", "app")
    book.report(URL, ORG, [])
    assert book.evaluate(URL) is not None  # the first evaluation, at 100
    assert book.ready_in(URL) is None  # nothing pending
    now[0] = 102.0
    book.report(URL, ORG, [job(1, ("typo",))])
    book.report(URL, other, [job(1, ("typo",))])
    assert book.evaluate(URL) is None  # skipped: 2 s after the last one
    assert book.ready_in(URL) == pytest.approx(3.0)
    assert book.asked_by(URL) == ("team-a", "team-b")
    now[0] = 105.0
    assert book.evaluate(URL) is not None
    assert book.ready_in(URL) is None and book.asked_by(URL) == ()


def test_a_group_that_leaves_has_its_gitea_evaluated_after_the_pass_without_waiting():
    """Its jobs may now be unmatched: the evaluation after the pass is not held back for
    min_interval, and only the Gitea with news is evaluated."""
    now = [100.0]
    book = Book(min_interval=5.0, clock=lambda: now[0])
    other = claimant("team-b/app", Scope.REPO, "acme", "app")
    book.report(URL, ORG, [job(1, ("linux",))])
    book.report(URL, other, [job(1, ("linux",))])
    assert book.due() == [(URL, False)]
    assert book.evaluate(URL) is not None
    assert book.due() == []
    now[0] = 101.0
    book.remove(other.key)  # the group left
    assert book.due() == [(URL, True)]
    verdict = book.evaluate(URL, force=True)
    assert verdict is not None and book.due() == []


class EventCluster(FakeCluster):
    def __init__(self) -> None:
        super().__init__()
        self.said: list[tuple[str, str, str]] = []

    async def emit_event(self, group: Any, event_type: str, reason: str, message: str) -> None:
        await super().emit_event(group, event_type, reason, message)
        self.said.append((group["metadata"]["name"], reason, message))


def scrape(metrics: Metrics) -> str:
    return metrics.render().decode()


async def test_the_operator_warns_the_observing_group_and_exports_the_metric():
    typo = ActionJob(
        id=4,
        labels=("ubuntu-lastest",),
        status="queued",
        url="https://gitea.example.com/api/v1/repos/acme/widgets/actions/jobs/4",
        created_at=QUEUED,
    )
    snap = Snapshot(1.0, "2026-01-01T00:00:10Z", Observation(queued=(typo,), runners=()))
    cluster = EventCluster()
    reconciler, _, _ = make(cluster, snap)
    await reconciler.reconcile(KEY)
    await reconciler.reconcile(KEY)
    await reconciler.unmatched.idle()  # evaluated in the background, after the pass
    (event,) = [m for m in cluster.said if m[1] == "UnmatchedJobs"]
    assert event[0] == "ci"
    assert "did you mean 'ubuntu-latest'?" in event[2]
    assert typo.url in event[2]
    text = scrape(reconciler._metrics)
    assert (
        'gitea_runner_operator_unmatched_jobs{gitea="https://gitea.example.com",'
        'labels="ubuntu-lastest"} 1.0'
    ) in text
    assert cluster.unsynced == []  # no runner for a job it cannot run


async def test_an_unmatched_evaluation_skipped_for_its_interval_comes_back_by_itself():
    """The second typo job arrives within the book's min_interval of the first evaluation:
    the background evaluations come back for it then, so the Event does not wait for the
    resync, and no pass is queued for it."""
    first = ActionJob(id=4, labels=("ubuntu-lastest",), status="queued",
                      url="https://gitea.example.com/api/v1/repos/acme/widgets/actions/jobs/4",
                      created_at=QUEUED)  # fmt: skip
    second = ActionJob(id=5, labels=("ubuntu-lates",), status="queued",
                       url="https://gitea.example.com/api/v1/repos/acme/widgets/actions/jobs/5",
                       created_at=QUEUED)  # fmt: skip
    cluster = EventCluster()
    reconciler, sources, _ = make(
        cluster, Snapshot(1.0, "2026-01-01T00:00:10Z", Observation(queued=(first,), runners=()))
    )
    await reconciler.reconcile(KEY)
    await reconciler.reconcile(KEY)
    await reconciler.unmatched.idle()  # evaluated: the first Event
    sources.source.latest = Snapshot(
        2.0, "2026-01-01T00:00:12Z", Observation(queued=(first, second), runners=())
    )
    await reconciler.reconcile(KEY)  # within min_interval: skipped
    await reconciler.unmatched.idle()
    assert reconciler.unmatched.wake_in == pytest.approx(5.0)
    said = len([m for m in cluster.said if m[1] == "UnmatchedJobs"])
    reconciler._clock.now += 5.0  # what the timer waits for; then it pokes
    reconciler.unmatched.poke()
    await reconciler.unmatched.idle()
    assert len([m for m in cluster.said if m[1] == "UnmatchedJobs"]) == said + 1
    await reconciler.close()


def test_the_shipped_rules_alert_on_unmatched_jobs_queued_for_ten_minutes():
    import yaml

    from tests.support import CHART, MONITORING

    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())["spec"]
    chart = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
    for doc in (rule, chart):
        (alert,) = [r for g in doc["groups"] for r in g["rules"]
                    if r["alert"] == "GiteaRunnerJobsUnmatched"]  # fmt: skip
        assert "unmatched_oldest_job_created_timestamp_seconds" in alert["expr"]
        assert alert["expr"].endswith("> 600")


def test_the_event_on_a_group_names_only_its_own_namespaces_groups_and_jobs():
    """Tenants share a Gitea, not their groups: team-a's Event says that other namespaces
    offer the labels, never which groups, and shows a job team-a listed itself."""
    own_gpu = claimant("team-a/gpu", Scope.REPO, "acme", "ml", labels=("gpu",))
    sightings = [Sighting(URL, "team-c/app", [job(1, ("gpu",), "other/secret-app")]),
                 Sighting(URL, "team-a/org", [job(2, ("gpu",)), job(3, ("gpu",))])]  # fmt: skip
    (s,) = find_unmatched(sightings, [Offer(URL, c) for c in (ORG, GPU, own_gpu)])
    message = describe(s, "team-a/org")
    assert "team-b" not in message and "secret-app" not in message
    assert "team-a/gpu" in message and "1 group(s) of other namespaces" in message
    assert message.startswith("2 queued job(s)")
    assert f"{URL}/api/v1/repos/acme/app/actions/jobs/2" in message
    other = describe(s, "team-c/app")
    assert "team-a" not in other and "team-b" not in other
    assert other.startswith("1 queued job(s)") and "secret-app" in other
    assert "offered by 2 group(s) of other namespaces" in other


def test_an_evaluation_costs_a_bounded_amount_of_work_whatever_the_queue(monkeypatch):
    """A Gitea listing thousands of queued jobs, each with a label of its own, beside 10
    groups of 64 labels: the nearest-label search runs for the largest label sets only,
    against a bounded list of offered labels, and only those sets are warned about, so the
    work is the same for 1,000 jobs as for 4,000 (before: 640 comparisons per job, 6.8 s of
    CPU for 2,500 jobs, and one warning per job)."""
    import difflib

    from gitea_runner_operator.reconcile.why import unmatched as module

    compared = [0]
    close_matches = difflib.get_close_matches

    def counting(word: str, possibilities: Any, *args: Any, **kwargs: Any) -> list[str]:
        possibilities = list(possibilities)
        compared[0] += len(possibilities)
        return close_matches(word, possibilities, *args, **kwargs)

    monkeypatch.setattr(module.difflib, "get_close_matches", counting)
    offered = [tuple(f"ubuntu-{g}-{k}" for k in range(64)) for g in range(10)]
    groups = [claimant(f"team-{g}/g", Scope.ORG, "acme", labels=offered[g]) for g in range(10)]
    work = []
    for n in (1000, 4000):
        compared[0] = 0
        book = Book(min_interval=0)
        jobs = [job(i, (f"lbl-{i:05d}-x",)) for i in range(1, n + 1)]
        for c in groups:
            book.report(URL, c, jobs)
        verdict = book.evaluate(URL)
        weighed = min(n, MAX_SETS_WEIGHED)  # the oldest jobs' label sets
        assert verdict is not None and len(verdict.sets) == weighed
        assert sum(b.count for b in buckets(verdict.sets).values()) == weighed
        assert verdict.unweighed == n - weighed  # every job weighed or counted as not
        assert len(verdict.warn) <= module.MAX_LABEL_SETS
        work.append(compared[0])
    assert work[0] == work[1] <= module.MAX_LABEL_SETS * module.MAX_NEAREST_CANDIDATES


async def test_past_the_label_sets_weighed_the_oldest_jobs_are_counted_and_the_log_says_so():
    """A Gitea inventing a label set per job: the evaluation weighs the jobs of the first
    MAX_SETS_WEIGHED sets (oldest first), whatever the queue holds, and one line a minute
    says how many jobs were left out; jobs of a set already weighed still count."""
    book = Book(min_interval=0)
    jobs = [job(i, (f"lbl-{i:05d}",)) for i in range(1, MAX_SETS_WEIGHED + 501)]
    jobs.append(job(MAX_SETS_WEIGHED + 501, ("lbl-00001",)))  # a set already weighed
    book.report(URL, ORG, jobs)
    verdict = book.evaluate(URL)
    assert verdict is not None and verdict.unweighed == 500
    assert max(s.jobs[0].id for s in verdict.sets) == MAX_SETS_WEIGHED
    (first,) = [s for s in verdict.sets if s.labels == ("lbl-00001",)]
    assert len(first.jobs) == 2

    async def emit(*_: Any) -> None:
        pass

    metrics = WhyMetrics.of(Metrics().registry)
    with capture_logs() as logs:
        for _ in range(3):
            await publish(verdict, metrics, lambda k: None, emit, book.log_rate)
    lines = [e for e in logs if e["event"].startswith("queued jobs not weighed")]
    assert [(line["jobs"], line["held_back"]) for line in lines] == [(500, 0)]


async def test_a_gitea_with_thousands_of_invented_label_sets_costs_one_log_line_per_minute():
    """Each label set is warned about once an hour, but a tenant's Gitea can invent a new
    set for every job: the log gets one line per Gitea per minute, and the next one says how
    many were held back."""
    now = [0.0]
    book = Book(clock=lambda: now[0])
    metrics = WhyMetrics.of(Metrics().registry)

    async def emit(*_: Any) -> None:
        pass

    def invented(start: int) -> Verdict:
        sets = unmatched([job(i, (f"label-{i}",)) for i in range(start, start + 500)], [ORG])
        return Verdict(URL, tuple(sets), tuple(sets))

    with capture_logs() as logs:
        await publish(invented(0), metrics, lambda key: None, emit, book.log_rate)
        now[0] = 30.0
        await publish(invented(500), metrics, lambda key: None, emit, book.log_rate)
        now[0] = 61.0
        await publish(invented(1000), metrics, lambda key: None, emit, book.log_rate)
    lines = [e for e in logs if e["event"] == "unmatched jobs"]
    assert [line["held_back"] for line in lines] == [0, 999]
    assert all(line["gitea"] == URL for line in lines)


async def test_the_evaluation_runs_beside_the_event_loop_one_per_gitea_at_a_time(monkeypatch):
    """A tenant's Gitea lists thousands of jobs, each with a label of its own: the evaluation
    (1-2 s of CPU) runs in the background, in the book's thread, so the event loop (the
    probes, the Lease's heartbeat, every other group) goes on meanwhile, as the loop watch
    sees; a change while it runs starts no second one, and is evaluated after it. The
    evaluation here waits for the loop watch to wake twice: on the loop it could not."""
    import threading

    from gitea_runner_operator.reconcile.why import unmatched_book as module
    from gitea_runner_operator.reconcile.why.unmatched_flight import Evaluations
    from gitea_runner_operator.runtime.loopwatch import LoopWatch

    loop_thread = threading.get_ident()
    ran_in: list[int] = []
    woke_twice = threading.Event()
    real = module.find_unmatched

    def slow(*args: Any, **kwargs: Any) -> list[Any]:
        ran_in.append(threading.get_ident())
        assert woke_twice.wait(10), "the loop watch did not wake while the evaluation ran"
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "find_unmatched", slow)
    wakes: list[float] = []
    second_wake = asyncio.Event()

    def woke(lag: float) -> None:
        wakes.append(lag)
        if len(wakes) >= 2:
            second_wake.set()

    book = Book(min_interval=0)
    published: list[Verdict] = []

    async def keep(verdict: Verdict) -> None:
        published.append(verdict)

    evaluations = Evaluations(book.book, book.ledger.members.of_url, keep)
    book.report(URL, ORG, [job(i, (f"invented-{i}",)) for i in range(1, 2001)])
    async with LoopWatch(interval=0.01, observe=woke):
        evaluations.poke()
        await second_wake.wait()
        book.report(URL, GPU, [job(1, ("invented-1",))])
        evaluations.poke()  # one at a time: the second waits for the first
        assert len(ran_in) == 1 and book.pending(URL)
        woke_twice.set()
        await evaluations.idle()
    first, again = published
    assert len(first.sets) == MAX_SETS_WEIGHED
    assert first.series is not None
    assert sum(b.count for b in first.series.values()) == MAX_SETS_WEIGHED
    assert ran_in and loop_thread not in ran_in and len(ran_in) == 2
    assert evaluations.latest(URL) is again and again.sets[0].observers == {ORG.key, GPU.key}
    await evaluations.close()


async def test_a_group_that_leaves_has_its_gitea_evaluated_in_the_background_at_once():
    book = Book(min_interval=3600)
    published: list[Verdict] = []

    async def keep(verdict: Verdict) -> None:
        published.append(verdict)

    from gitea_runner_operator.reconcile.why.unmatched_flight import Evaluations

    evaluations = Evaluations(book.book, book.ledger.members.of_url, keep)
    book.report(URL, ORG, [job(1, ("ubuntu-lastest",))])
    book.report(URL, GPU, [job(1, ("ubuntu-lastest",))])
    evaluations.poke()
    await evaluations.idle()
    book.remove(GPU.key)
    evaluations.poke()
    await evaluations.idle()  # not held back for the hour of min_interval
    _, after = published
    (s,) = after.sets
    assert s.observers == {ORG.key}
    await evaluations.close()


async def test_jobs_the_listing_only_counted_are_still_warned_about_with_their_count():
    """The forge keeps only a count and the oldest job of each label set no group of the
    Gitea offers (forge/unserved.py): the Event and the metric still say how many there are,
    and the example is the oldest job."""
    from gitea_runner_operator.api.gitea import Unserved

    oldest = ActionJob(
        id=4,
        labels=("ubuntu-lastest",),
        status="queued",
        url="https://gitea.example.com/api/v1/repos/acme/widgets/actions/jobs/4",
        created_at=QUEUED,
    )
    observation = Observation(
        queued=(), runners=(), unserved=(Unserved(("ubuntu-lastest",), 3, oldest),)
    )
    cluster = EventCluster()
    reconciler, _, _ = make(cluster, Snapshot(1.0, "2026-01-01T00:00:10Z", observation))
    await reconciler.reconcile(KEY)
    await reconciler.reconcile(KEY)
    await reconciler.unmatched.idle()
    (event,) = [m for m in cluster.said if m[1] == "UnmatchedJobs"]
    assert "3 queued job(s) with runs-on [ubuntu-lastest]" in event[2]
    assert "did you mean 'ubuntu-latest'?" in event[2]
    assert oldest.url in event[2]
    assert (
        'gitea_runner_operator_unmatched_jobs{gitea="https://gitea.example.com",'
        'labels="ubuntu-lastest"} 3.0'
    ) in scrape(reconciler._metrics)
    await reconciler.close()


def test_counted_jobs_of_two_groups_listing_one_scope_count_once():
    from gitea_runner_operator.api.gitea import Unserved

    counted = (Unserved(("typo",), 5, job(2, ("typo",))),)
    (s,) = find_unmatched(
        [
            Sighting(URL, "team-a/org", [job(1, ("typo",))], counted),
            Sighting(URL, "team-b/org", [], counted),
        ],
        [Offer(URL, ORG)],
    )
    assert s.count == 5 and s.jobs[0].id == 1  # at least the 5 counted, the oldest first
    assert s.observers == {"team-a/org", "team-b/org"}
    assert "5 queued job(s)" in describe(s, "team-b/org")
