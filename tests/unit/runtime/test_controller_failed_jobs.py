"""runner_jobs_failed_total counts each runner Job the watch shows turning Failed, once: not
again for a later event of the same Failed Job, not for its deletion, not for one that
completed, and not for one first listed Failed (after a restart or a take: whoever saw it
fail counted it)."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

from gitea_runner_operator.api import constants
from gitea_runner_operator.runtime.controller import Controller
from gitea_runner_operator.settings import Settings


def job(name: str, rv: str, condition: str | None = None) -> dict[str, Any]:
    conditions = [{"type": condition, "status": "True"}] if condition else []
    return {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "resourceVersion": rv,
            "labels": {constants.GROUP_NAME_LABEL: "ci", constants.MANAGED_BY_LABEL: "x"},
        },
        "status": {"conditions": conditions},
    }


def failed_total(controller: Controller) -> float:
    value = controller.metrics.registry.get_sample_value(
        "gitea_runner_operator_runner_jobs_failed_total",
        {"namespace": "team-a", "runnergroup": "ci"},
    )
    return value or 0.0


async def test_a_runner_job_seen_failed_is_counted_once() -> None:
    async with client.ApiClient() as api:
        controller = Controller(api, Settings())
        watch = controller.cache.jobs[0]
        watch._apply("ADDED", job("ci-a", "1"))
        watch._apply("MODIFIED", job("ci-a", "2", "Failed"))
        watch._apply("MODIFIED", job("ci-a", "3", "Failed"))  # a later event, same verdict
        watch._apply("DELETED", job("ci-a", "4", "Failed"))
        watch._apply("ADDED", job("ci-b", "5"))
        watch._apply("MODIFIED", job("ci-b", "6", "Complete"))
        assert failed_total(controller) == 1


async def test_a_runner_job_first_listed_failed_is_not_counted_again() -> None:
    async with client.ApiClient() as api:
        controller = Controller(api, Settings())
        watch = controller.cache.jobs[0]
        watch._apply("ADDED", job("ci-old", "1", "Failed"))  # a restart's first list
        watch._apply("MODIFIED", job("ci-old", "2", "Failed"))
        assert failed_total(controller) == 0
        watch._apply("ADDED", job("ci-new", "3"))
        watch._apply("MODIFIED", job("ci-new", "4", "Failed"))
        assert failed_total(controller) == 1
