"""Gitea Actions payloads as plain values, reduced to the fields the operator decides on.

Unknown fields are ignored so newer Gitea releases do not break us; missing required fields are
a protocol error rather than a silent zero.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Final, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gitea_runner_operator.api import caps


class Payload(BaseModel):
    """A forge API answer: unknown fields ignored (forges add them), values frozen."""

    model_config = ConfigDict(extra="ignore", frozen=True)


# Gitea's ids are int64; names VARCHAR(255); statuses one short word.
Id = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
Name = Annotated[str, Field(max_length=caps.ANSWER_NAME_MAX_CHARS)]
Status = Annotated[str, Field(max_length=caps.ANSWER_STATUS_MAX_CHARS)]

# The pydantic error types of a cap (a length or a bound), as opposed to a wrong shape.
CAP_ERRORS: Final = frozenset(
    {"too_long", "string_too_long", "less_than_equal", "greater_than_equal"}
)
P = TypeVar("P", bound=BaseModel)


def within_caps(model: type[P], entries: Iterable[object]) -> tuple[list[P], list[str]]:
    """The entries of a listing that fit ``model``'s caps, and the cause of each refused one
    (``labels: too long``). An entry past a cap is refused whole, never cut short and kept
    in part; one of the wrong shape raises ValidationError (the answer is not Gitea's)."""
    kept: list[P] = []
    refused: list[str] = []
    for entry in entries:
        try:
            kept.append(model.model_validate(entry))
        except ValidationError as exc:
            errors = exc.errors(include_url=False)
            if any(e["type"] not in CAP_ERRORS for e in errors):
                raise
            first = errors[0]
            what = "too long" if first["type"].endswith("too_long") else "out of range"
            refused.append(f"{'.'.join(str(p) for p in first['loc'])}: {what}")
    return kept, refused


class ActionJob(Payload):
    """One workflow job as ``/actions/jobs`` lists it."""

    id: Id
    run_id: Id = 0
    name: Name = ""
    labels: tuple[caps.JobLabel, ...] = Field(default=(), max_length=caps.JOB_LABELS_MAX)
    status: Status
    runner_id: Id = 0
    runner_name: Name = ""
    # Capped before the accounting memoises repositories by it (reconcile/capacity/accounting.py).
    url: str = Field(default="", max_length=caps.JOB_URL_MAX_CHARS)
    # Gitea's own timestamps; an unclaimed job carries the zero time 1970-01-01T00:00:00Z.
    created_at: datetime | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    # Forgejo >= 15 only: the attempt's handle, which ``one-job --handle`` binds a runner to.
    handle: str = Field(default="", max_length=caps.HANDLE_MAX_CHARS)

    @field_validator("labels")
    @classmethod
    def _shared_labels(cls, labels: tuple[str, ...]) -> tuple[str, ...]:
        """Each label text once in memory, however many jobs carry it: a queue of 25,000
        jobs of the same 64 labels keeps 64 strings, not 1.6 million (interned strings go
        when the last job naming them does)."""
        return tuple(map(sys.intern, labels))


class JobList(Payload):
    jobs: list[ActionJob] | None = Field(default=None)
    total_count: int = 0


class RunnerLabelPayload(Payload):
    name: caps.SpecLabel


class ActionRunner(Payload):
    """A registered runner. Names are not unique in Gitea; ours are Pod names, which are."""

    id: Id
    name: Name
    status: Status = ""
    busy: bool = False
    ephemeral: bool = False
    labels: tuple[RunnerLabelPayload, ...] = Field(default=(), max_length=caps.RUNNER_LABELS_MAX)

    @property
    def online(self) -> bool:
        return self.status == "online"


class RunnerList(Payload):
    runners: list[ActionRunner] | None = Field(default=None)
    total_count: int = 0


T = TypeVar("T")


class OwnerKind(StrEnum):
    """Whether an ``org`` scope names an organisation or the auth token's own user."""

    ORG = "org"
    USER = "user"


@dataclass(frozen=True, slots=True)
class Unserved:
    """Queued jobs of one ``runs-on`` label set that no group of their Gitea could run (a
    label none of them offers): dropped where they are listed, only counted, with the oldest
    as the example the unmatched-jobs warning shows."""

    labels: tuple[str, ...]  # sorted
    count: int
    example: ActionJob


# Label sets of unserved jobs kept per listing with their count and example (the first met:
# the oldest); the jobs of further sets are only counted.
MAX_UNSERVED_SETS: Final = 20


@dataclass(frozen=True, slots=True)
class Listing(Generic[T]):
    """A paginated result; ``complete`` is False when the page cap cut it short.
    ``unserved``: the jobs dropped because no group could run them, by label set (the
    first ``MAX_UNSERVED_SETS`` met), and ``unserved_other`` those of further sets."""

    items: tuple[T, ...]
    complete: bool
    unserved: tuple[Unserved, ...] = ()
    unserved_other: int = 0
