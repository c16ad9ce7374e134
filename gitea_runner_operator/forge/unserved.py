"""Queued jobs no group of their Gitea could run, dropped where they are listed.

A tenant's Gitea may list thousands of queued jobs with labels nobody offers (a typo in a
workflow, or an attack: 40 Gitea URLs of 4,000 such jobs each). Kept, each costs about 2 KiB
in every observation that lists it, every few seconds, and the unmatched-jobs evaluation
walks them all. Gitea hands a job only to a runner offering every label of its
``runs-on``, so a job with a label no group of that Gitea offers (the union of their
offers, from the reconcile layer's ledger: an input here, see forge/observe.py) can be run
by none of them: it is counted by label set and dropped, and only the first
``MAX_UNSERVED_SETS`` sets keep a count and their oldest job as the example the
unmatched-jobs warning shows (reconcile/why/unmatched.py).
"""

from __future__ import annotations

from collections.abc import Collection

from gitea_runner_operator.api import caps
from gitea_runner_operator.api.gitea import MAX_UNSERVED_SETS, ActionJob, Unserved
from gitea_runner_operator.api.scope import labels_fit


class UnservedTally:
    """Decides, job by job, what a listing keeps; counts what it drops. Only the first
    ``MAX_UNSERVED_SETS`` label sets met keep a count and an example (Gitea lists the oldest
    jobs first, so these are the oldest sets, as reconcile/why/unmatched_book.py weighs
    them); the jobs of the others are only counted: what a listing holds stays bounded
    however many label sets a Gitea invents (an example per set held every job of a queue
    with a label of its own each)."""

    def __init__(self, offered: Collection[str]) -> None:
        self._offered = offered
        self._ids: set[int] = set()  # pages may overlap while jobs move: each job once
        self._counts: dict[tuple[str, ...], int] = {}  # sorted labels -> jobs
        self._examples: dict[tuple[str, ...], ActionJob] = {}  # ... -> the oldest job
        self._other = 0

    def screen(self, entry: object) -> bool:
        """Whether a listed item, as parsed and not yet validated, needs its model: not
        when it is a queued job no group could run whose count is all that is kept (it is
        counted here). Building a model per such job (a validation of each label, 2 KiB
        allocated and freed) was most of a listing's CPU on the loop and what kept its
        garbage collector busy. Anything unclear (a wrong shape, a value past a cap) is
        left to the model's validation, which refuses or rejects it."""
        if not isinstance(entry, dict) or entry.get("status") != "queued":
            return True
        labels, job_id = entry.get("labels"), entry.get("id")
        if (
            type(job_id) is not int
            or not isinstance(labels, list)
            or len(labels) > caps.JOB_LABELS_MAX
            or not all(type(x) is str and len(x) <= caps.JOB_LABEL_MAX_CHARS for x in labels)
            or labels_fit(labels, self._offered)
        ):
            return True
        if job_id in self._ids:
            return False
        key = tuple(sorted(labels))
        example = self._examples.get(key)
        if example is None and len(self._counts) < MAX_UNSERVED_SETS:
            return True  # a new set: its first job becomes the example (keeps counts it)
        if example is not None and job_id < example.id:
            return True  # an older example
        self._ids.add(job_id)
        if example is None:
            self._other += 1
        else:
            self._counts[key] += 1
        return False

    def keeps(self, job: ActionJob) -> bool:
        """Whether some group could run ``job``; if not, it is counted here instead."""
        if job.status != "queued" or labels_fit(job.labels, self._offered):
            return True
        if job.id in self._ids:
            return False
        self._ids.add(job.id)
        labels = tuple(sorted(job.labels))
        count = self._counts.get(labels)
        if count is None and len(self._counts) >= MAX_UNSERVED_SETS:
            self._other += 1
            return False
        self._counts[labels] = (count or 0) + 1
        example = self._examples.get(labels)
        if example is None or job.id < example.id:
            self._examples[labels] = job
        return False

    @property
    def dropped(self) -> int:
        return len(self._ids)

    def result(self) -> tuple[tuple[Unserved, ...], int]:
        """The label sets kept (the largest first, ties by labels) with their counts and
        examples, and how many jobs the other sets hold."""
        ranked = sorted(self._counts.items(), key=lambda item: (-item[1], item[0]))
        kept = tuple(Unserved(labels, count, self._examples[labels]) for labels, count in ranked)
        return kept, self._other
