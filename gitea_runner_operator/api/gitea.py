"""Gitea Actions payloads as plain values, reduced to the fields the operator decides on.

Unknown fields are ignored so newer Gitea releases do not break us; missing required fields are
a protocol error rather than a silent zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field


class Payload(BaseModel):
    """A forge API answer: unknown fields ignored (forges add them), values frozen."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class ActionJob(Payload):
    """One workflow job as ``/actions/jobs`` lists it."""

    id: int
    run_id: int = 0
    name: str = ""
    labels: tuple[str, ...] = ()
    status: str
    runner_id: int = 0
    runner_name: str = ""
    url: str = ""
    # Gitea's own timestamps; an unclaimed job carries the zero time 1970-01-01T00:00:00Z.
    created_at: datetime | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    # Forgejo >= 15 only: the attempt's handle, which ``one-job --handle`` binds a runner to.
    handle: str = ""


class JobList(Payload):
    jobs: list[ActionJob] | None = Field(default=None)
    total_count: int = 0


class RunnerLabelPayload(Payload):
    name: str


class ActionRunner(Payload):
    """A registered runner. Names are not unique in Gitea; ours are Pod names, which are."""

    id: int
    name: str
    status: str = ""
    busy: bool = False
    ephemeral: bool = False
    labels: tuple[RunnerLabelPayload, ...] = ()

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
class Listing(Generic[T]):
    """A paginated result; ``complete`` is False when the page cap cut it short."""

    items: tuple[T, ...]
    complete: bool
