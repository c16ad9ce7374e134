"""What the operator keeps of a tenant's input is bounded in bytes, whatever the tenant sends
(issue 36, rows 3 and 5)."""

from __future__ import annotations

import tracemalloc

from gitea_runner_operator.api import caps
from gitea_runner_operator.api.gitea import ActionJob
from gitea_runner_operator.reconcile.capacity import accounting
from tests.support.deepsize import deep_size


def test_the_job_url_memo_holds_a_bounded_number_of_bytes():
    accounting._repository_of.cache_clear()
    pad = caps.JOB_URL_MAX_CHARS - 200
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(20_000):
        url = f"https://g.example/api/v1/repos/o{i}/r/actions/jobs/{i}?" + "x" * pad
        accounting.job_repository(ActionJob(id=i, status="queued", url=url))
    kept = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert kept < 4 * 1024 * 1024, f"{kept / 2**20:.1f} MiB kept by the job-URL memo"


def test_jobs_of_one_repository_share_one_memo_entry():
    accounting._repository_of.cache_clear()
    for i in range(1_000):
        job = ActionJob(
            id=i, status="queued", url=f"https://g.example/api/v1/repos/Acme/W/actions/jobs/{i}"
        )
        assert accounting.job_repository(job) == ("acme", "w")
    assert accounting._repository_of.cache_info().currsize == 1


def test_deep_size_counts_what_a_value_reaches():
    small = deep_size({"a": ["x"]})
    assert deep_size({"a": ["x" * 10_000]}) >= small + 9_999
