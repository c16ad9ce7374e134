"""What the tenant memory budget charges for a kept answer is at least what it holds, as
tracemalloc measures it, and not far above (forge/budget.kept_size).

Before: 900 bytes an item and 60 a string charged less than a job holds (a job with a label
of its own holds about 1,700 B, and was charged about 1,200 B):
a tenant held more than its share said."""

from __future__ import annotations

import gc
import json
import tracemalloc
from collections.abc import Callable

import pytest

from gitea_runner_operator.api.gitea import JobList
from gitea_runner_operator.api.observation import Observation
from gitea_runner_operator.forge.budget import kept_size

SHAPES: dict[str, Callable[[int], list[str]]] = {
    "a label of its own": lambda i: [f"lbl-{i}-x"],
    "64 labels of 45 characters": lambda i: [f"{i:06d}-{k:02d}-".ljust(45, "x") for k in range(64)],
    "one shared label": lambda i: ["ubuntu-latest"],
}


def _page(first: int, labels: Callable[[int], list[str]]) -> bytes:
    jobs = [
        {"id": i, "run_id": i, "name": "build", "status": "queued", "labels": labels(i),
         "created_at": "2026-01-01T00:00:00Z",
         "url": f"http://gitea.example:3000/api/v1/repos/acme/app/actions/jobs/{i}"}
        for i in range(first, first + 50)
    ]  # fmt: skip
    return json.dumps({"jobs": jobs, "total_count": 200}).encode()


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_kept_answer_is_charged_at_least_what_it_holds(shape: str):
    labels = SHAPES[shape]
    JobList.model_validate(json.loads(_page(10_000, labels)))  # validators built beforehand
    bodies = [_page(1 + 50 * p, labels) for p in range(4)]
    gc.collect()
    tracemalloc.start()
    try:
        jobs = [
            job for body in bodies for job in JobList.model_validate(json.loads(body)).jobs or ()
        ]
        observation = Observation(queued=tuple(jobs), runners=())
        gc.collect()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    charged = kept_size(observation)
    assert held <= charged <= 1.5 * held, (shape, held, charged)
