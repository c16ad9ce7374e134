"""The metrics a Prometheus scrape sees: values parsed back from the exposition text, so a
renamed series or a wrong label breaks these tests as it would break a dashboard."""

from __future__ import annotations

import re

import aiohttp
import pytest
from aioresponses import aioresponses
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from gitea_runner_operator import __version__
from gitea_runner_operator.api.gitea import ActionJob
from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.forge.client import GiteaClient
from gitea_runner_operator.forge.errors import GiteaUnauthorized, GiteaUnreachable
from gitea_runner_operator.forge.scope import ScopeRef
from gitea_runner_operator.health import HealthServer
from gitea_runner_operator.kube.write_metrics import instrument_writes, resource_of
from gitea_runner_operator.metrics import PREFIX, Metrics, endpoint_class
from gitea_runner_operator.runtime.workqueue import WorkQueue
from tests.testbed.sandbox import free_port

ALLOWED_LABELS = {
    "namespace", "runnergroup", "state", "reason", "endpoint", "code", "verb", "resource",
    "outcome", "result", "version", "le",
}  # fmt: skip


def scrape(metrics: Metrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    samples = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return scrape(metrics).get((PREFIX + name, frozenset(labels.items())))


def group(ns: str = "team-a", rg: str = "ci") -> dict[str, str]:
    return {"namespace": ns, "runnergroup": rg}


def observe(m: Metrics, ns: str = "team-a", rg: str = "ci", **over: object) -> None:
    args = dict(queued=3, starting=1, idle=0, busy=2, desired=4, max_active=5, ready=True)
    args.update(over)
    m.group_observed(ns, rg, **args)  # type: ignore[arg-type]


def test_a_pass_sets_the_group_gauges_and_a_later_pass_replaces_them():
    m = Metrics()
    observe(m)
    assert value(m, "queued_jobs", **group()) == 3
    assert value(m, "runners", **group(), state="busy") == 2
    assert value(m, "runners", **group(), state="starting") == 1
    assert value(m, "desired_runners", **group()) == 4
    assert value(m, "max_active_runners", **group()) == 5
    assert value(m, "ready", **group()) == 1
    observe(m, queued=0, busy=0, ready=False, failed=2)
    assert value(m, "queued_jobs", **group()) == 0
    assert value(m, "runners", **group(), state="busy") == 0
    assert value(m, "ready", **group()) == 0
    assert value(m, "failed_runner_jobs", **group()) == 2


def test_counters_add_up_per_group_and_reason():
    m = Metrics()
    m.runners_created("team-a", "ci", 2)
    m.runners_created("team-a", "ci", 1)
    m.runners_created("team-b", "ci", 1)
    m.runners_created("team-b", "ci", 0)
    m.runner_reaped("team-a", "ci", "idle_timeout")
    m.runner_reaped("team-a", "ci", "idle_timeout")
    m.runner_job_failed("team-a", "ci", 3)
    assert value(m, "runners_created_total", **group()) == 3
    assert value(m, "runners_created_total", **group("team-b")) == 1
    assert value(m, "runners_reaped_total", **group(), reason="idle_timeout") == 2
    assert value(m, "runner_jobs_failed_total", **group()) == 3


def test_latency_histograms_count_observations_in_their_buckets():
    m = Metrics()
    m.job_startup_latency("team-a", "ci", 4.0)
    m.job_startup_latency("team-a", "ci", 50.0)
    m.job_duration("team-a", "ci", 100.0)
    assert value(m, "job_startup_latency_seconds_count", **group()) == 2
    assert value(m, "job_startup_latency_seconds_bucket", **group(), le="5.0") == 1
    assert value(m, "job_startup_latency_seconds_bucket", **group(), le="60.0") == 2
    assert value(m, "job_startup_latency_seconds_sum", **group()) == 54
    assert value(m, "job_duration_seconds_count", namespace="team-a") == 1


def test_a_group_costs_a_bounded_number_of_series_whatever_reasons_come():
    """Memory and scrape size grow with groups: one histogram per group, and a reason label
    that cannot take unbounded values."""
    m = Metrics()
    observe(m, failed=1)
    m.runners_created("team-a", "ci", 3)
    m.runner_job_failed("team-a", "ci")
    m.job_startup_latency("team-a", "ci", 4.0)
    m.job_duration("team-a", "ci", 100.0)
    for i in range(100):
        m.job_rerun("team-a", "ci", f"SomeControllerReason{i}")
        m.runner_reaped("team-a", "ci", "idle")
    per_group = [k for k in scrape(m) if ("runnergroup", "ci") in k[1]]
    histograms = {n.rsplit("_", 1)[0] for n, _ in per_group if n.endswith("_bucket")}
    assert histograms == {PREFIX + "job_startup_latency_seconds"}
    reruns = [k for k in per_group if k[0] == PREFIX + "jobs_rerun_total"]
    assert len(reruns) <= 25
    assert value(m, "jobs_rerun_total", **group(), reason="other") == 100 - (len(reruns) - 1)
    assert value(m, "runners_reaped_total", **group(), reason="idle") == 100
    assert len(per_group) <= 60


def test_forgetting_a_group_removes_only_its_series():
    m = Metrics()
    for ns in ("team-a", "team-b"):
        observe(m, ns, failed=1)
        m.runners_created(ns, "ci", 1)
        m.runner_reaped(ns, "ci", "idle_timeout")
        m.runner_job_failed(ns, "ci")
        m.job_startup_latency(ns, "ci", 3)
        m.job_duration(ns, "ci", 3)
    m.forget_group("team-a", "ci")
    m.forget_group("team-a", "never-seen")  # harmless
    keys = scrape(m)
    assert not [k for k in keys if ("namespace", "team-a") in k[1]]
    assert value(m, "runners_created_total", **group("team-b")) == 1
    assert value(m, "runners_reaped_total", **group("team-b"), reason="idle_timeout") == 1


def test_every_series_is_prefixed_and_labelled_only_by_bounded_labels():
    m = Metrics()
    observe(m)
    m.gitea_request("jobs", "200", 0.1)
    m.kube_write("create", "success", "jobs")
    m.reconcile_done(0.2, error=True)
    m.webhook_delivery("accepted")
    for name, labels in scrape(m):
        assert name.startswith(PREFIX), name
        assert {k for k, _ in labels} <= ALLOWED_LABELS, (name, labels)
    assert value(m, "build_info", version=__version__) == 1
    assert not [k for k in scrape(m) if k[0].endswith("_created")]


def test_every_metrics_object_starts_from_zero():
    first = Metrics()
    first.runners_created("team-a", "ci", 5)
    assert value(Metrics(), "runners_created_total", **group()) is None


def test_reconcile_webhook_and_leader_series():
    m = Metrics()
    m.reconcile_done(0.1, error=False)
    m.reconcile_done(0.1, error=True)
    m.reconcile_done(0.1, error=True)
    m.webhook_delivery("accepted")
    m.set_leader(True)
    assert value(m, "reconcile_errors_total") == 2
    assert value(m, "reconcile_duration_seconds_count", result="error") == 2
    assert value(m, "reconcile_duration_seconds_count", result="success") == 1
    assert value(m, "webhook_deliveries_total", outcome="accepted") == 1
    assert value(m, "leader") == 1
    m.set_leader(False)
    assert value(m, "leader") == 0


@pytest.mark.parametrize(
    ("method", "path", "cls"),
    [
        ("GET", "/api/v1/repos/acme/widgets/actions/jobs", "jobs"),
        ("GET", "/api/v1/admin/actions/jobs", "jobs"),
        ("GET", "/api/v1/orgs/acme/actions/runners", "runners"),
        ("GET", "/api/v1/user/actions/runners", "runners"),
        ("DELETE", "/api/v1/orgs/acme/actions/runners/17", "runner_delete"),
        ("GET", "/api/v1/orgs/acme", "scope"),
        ("GET", "/api/v1/repos/acme/widgets", "scope"),
        ("GET", "/api/v1/user", "scope"),
        ("GET", "/api/v1/version", "other"),
    ],
)
def test_gitea_paths_fall_into_a_fixed_set_of_endpoint_classes(method, path, cls):
    assert endpoint_class(method, path) == cls


REPO = ScopeRef(Scope.REPO, "acme", "widgets")
JOBS = re.compile(r"^http://gitea\.test/api/v1/repos/acme/widgets/actions/jobs\?.*$")


async def test_the_gitea_client_reports_each_request_code_and_retry_after_wait():
    m = Metrics()

    async def no_sleep(_: float) -> None:
        return None

    async with aiohttp.ClientSession() as session:
        client = GiteaClient(
            session, "http://gitea.test", "tok", sleep=no_sleep, backoff_initial=0.0,
            backoff_max=0.0, on_request=m.observe_gitea, on_rate_limit_wait=m.gitea_rate_limit_wait,
        )  # fmt: skip
        with aioresponses() as mock:
            mock.get(JOBS, status=429, headers={"Retry-After": "2"})
            mock.get(JOBS, payload={"jobs": [], "total_count": 0})
            await client.list_jobs(REPO)
            mock.get(JOBS, status=401)
            with pytest.raises(GiteaUnauthorized):
                await client.list_jobs(REPO)
            for _ in range(4):
                mock.get(JOBS, exception=aiohttp.ClientConnectionError("refused"))
            with pytest.raises(GiteaUnreachable):
                await client.list_jobs(REPO)
    assert value(m, "gitea_requests_total", endpoint="jobs", code="429") == 1
    assert value(m, "gitea_requests_total", endpoint="jobs", code="200") == 1
    assert value(m, "gitea_requests_total", endpoint="jobs", code="401") == 1
    assert value(m, "gitea_requests_total", endpoint="jobs", code="error") == 4
    assert value(m, "gitea_request_duration_seconds_count", endpoint="jobs") == 7
    assert value(m, "gitea_rate_limit_waits_total") == 1
    assert value(m, "gitea_rate_limit_wait_seconds_total") == 2


async def test_the_work_queue_reports_adds_depth_retries_and_durations():
    m = Metrics()
    now = [100.0]
    q: WorkQueue[str] = WorkQueue(metrics=m.workqueue, clock=lambda: now[0])
    q.add("ns/a")
    q.add("ns/a")  # de-duplicated: not an add
    q.add("ns/b")
    assert value(m, "workqueue_adds_total") == 2
    assert value(m, "workqueue_depth") == 2
    now[0] = 103.0
    key = await q.get()
    assert value(m, "workqueue_depth") == 1
    assert value(m, "workqueue_queue_duration_seconds_sum") == 3
    now[0] = 110.0
    assert value(m, "workqueue_longest_running_processor_seconds") == 7
    q.add_rate_limited(key)
    q.done(key)
    assert value(m, "workqueue_retries_total") == 1
    assert value(m, "workqueue_work_duration_seconds_sum") == 7
    assert value(m, "workqueue_longest_running_processor_seconds") == 0
    q.shut_down()


class FakeApi:
    """The one method of kubernetes_asyncio's ApiClient that the write counter wraps."""

    def __init__(self) -> None:
        self.answers: list[object] = []

    async def request(self, method: str, url: str, **_: object) -> object:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


class Answer:
    def __init__(self, status: int) -> None:
        self.status = status


async def test_kube_writes_are_counted_by_verb_resource_and_outcome_reads_are_not():
    m = Metrics()
    api = FakeApi()
    instrument_writes(api, m.kube_write)
    host = "https://127.0.0.1:6443"
    api.answers = [
        Answer(201),
        ApiException(status=409),
        Answer(200),
        Answer(200),
        ApiException(status=404),
        Answer(200),
    ]
    await api.request("POST", f"{host}/apis/batch/v1/namespaces/a/jobs")
    with pytest.raises(ApiException):
        await api.request("POST", f"{host}/apis/batch/v1/namespaces/a/jobs")
    await api.request(
        "PATCH", f"{host}/apis/gitea.bpg.pw/v1alpha1/namespaces/a/runnergroups/ci/status"
    )
    await api.request("GET", f"{host}/apis/batch/v1/namespaces/a/jobs?watch=true")
    with pytest.raises(ApiException):
        await api.request("DELETE", f"{host}/apis/batch/v1/namespaces/a/jobs/ci-x")
    await api.request("POST", f"{host}/api/v1/namespaces/a/events")
    w = "kube_writes_total"
    assert value(m, w, verb="create", resource="jobs", outcome="success") == 1
    assert value(m, w, verb="create", resource="jobs", outcome="conflict") == 1
    assert value(m, w, verb="patch", resource="runnergroups/status", outcome="success") == 1
    assert value(m, w, verb="delete", resource="jobs", outcome="not_found") == 1
    assert value(m, w, verb="create", resource="events", outcome="success") == 1
    assert sum(v for (n, _), v in scrape(m).items() if n == PREFIX + w) == 5


@pytest.mark.parametrize(
    ("url", "resource"),
    [
        ("https://h:6443/apis/batch/v1/namespaces/a/jobs/x", "jobs"),
        ("https://h/apis/coordination.k8s.io/v1/namespaces/o/leases/gro", "leases"),
        ("https://h/api/v1/namespaces/a/events", "events"),
        ("https://h/apis/gitea.bpg.pw/v1alpha1/namespaces/a/runnergroups/x/status",
         "runnergroups/status"),
        ("https://h/something/else", "other"),
    ],
)  # fmt: skip
def test_the_resource_label_is_the_type_never_a_name(url, resource):
    assert resource_of(url) == resource


async def test_the_health_server_serves_metrics_in_prometheus_text_format():
    m = Metrics()
    observe(m)
    port = free_port()
    server = HealthServer("127.0.0.1", port, lambda: True, m)
    await server.start()
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/metrics") as resp,
        ):
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            text = await resp.text()
    finally:
        await server.stop()
    assert 'gitea_runner_operator_queued_jobs{namespace="team-a",runnergroup="ci"} 3.0' in text


async def test_without_metrics_the_health_server_has_no_metrics_path():
    port = free_port()
    server = HealthServer("127.0.0.1", port, lambda: True)
    await server.start()
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/metrics") as resp,
        ):
            assert resp.status == 404
    finally:
        await server.stop()


ZERO = "1970-01-01T00:00:00Z"


def gitea_job(job_id: int, runner: str, created: str, started: str = ZERO, done: str = ZERO):
    return ActionJob.model_validate(
        {
            "id": job_id,
            "status": "in_progress" if done == ZERO else "success",
            "runner_id": 7 if runner else 0,
            "runner_name": runner,
            "created_at": created,
            "started_at": started,
            "completed_at": done,
        }
    )


def test_job_latency_comes_from_gitea_timestamps_once_per_job_and_never_from_zero_times():
    m = Metrics()
    jobs = [
        gitea_job(1, "ci-abc-1", "2026-01-01T10:00:00Z", "2026-01-01T10:00:12Z"),
        gitea_job(2, "ci-abc-2", "2026-01-01T10:00:00Z", "2026-01-01T10:01:00Z",
                  "2026-01-01T10:03:00Z"),
        gitea_job(3, "", "2026-01-01T10:00:00Z"),  # queued: no runner, zero times
        gitea_job(4, "someone-elses", "2026-01-01T10:00:00Z", "2026-01-01T10:00:01Z"),
    ]  # fmt: skip

    def ours(job):
        return job.runner_name.startswith("ci-abc-")

    for _ in range(3):  # the same list on every poll
        m.observe_jobs("team-a", "ci", jobs, ours)
    assert value(m, "job_startup_latency_seconds_count", **group()) == 2
    assert value(m, "job_startup_latency_seconds_sum", **group()) == 12 + 60
    assert value(m, "job_duration_seconds_count", namespace="team-a") == 1
    assert value(m, "job_duration_seconds_sum", namespace="team-a") == 120

    m.forget_group("team-a", "ci")
    m.observe_jobs("team-a", "ci", jobs[:1], ours)  # a re-created group starts afresh
    assert value(m, "job_startup_latency_seconds_count", **group()) == 1


def test_the_memory_of_seen_jobs_is_bounded_by_time_and_size():
    """A busy group over weeks: ids no longer listed are forgotten after the TTL, and never
    more than the cap are kept, while a job still listed is never observed twice."""
    from gitea_runner_operator.metrics import SEEN_JOBS_PER_GROUP, SEEN_JOBS_TTL

    now = [0.0]
    m = Metrics(clock=lambda: now[0])
    start, running = "2026-01-01T10:00:00Z", "2026-01-01T10:00:05Z"
    long_running = gitea_job(1, "ci-abc-1", start, running)
    for batch in range(40):  # 40 polls, a page of 50 new running jobs each, plus job 1
        page = [gitea_job(1000 + batch * 50 + i, "ci-abc-x", start, running) for i in range(50)]
        m.observe_jobs("team-a", "ci", [long_running, *page], lambda job: True)
        now[0] += 60
        assert len(m._seen[("team-a", "ci", "started")]) <= SEEN_JOBS_PER_GROUP
    assert value(m, "job_startup_latency_seconds_count", **group()) == 1 + 40 * 50
    now[0] += SEEN_JOBS_TTL + 1
    m.observe_jobs("team-a", "ci", [], lambda job: True)
    assert len(m._seen[("team-a", "ci", "started")]) == 0
