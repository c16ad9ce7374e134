"""What one process remembers about a group between reconcile passes."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class GroupState:
    """What one process remembers about a group between passes: only backoffs and what it
    has already reported. Losing it (a restart) costs at most one more retry or log line."""

    stuck_jobs: set[str] = field(default_factory=set)
    stuck_failures: int = 0
    blocked_until: float = 0.0
    stuck_message: str | None = None
    create_error: str | None = None
    create_failures: int = 0
    create_retry_at: float = 0.0
    # The batch the next pass's creates start with (reconcile/steps/create.py): 1 until a pass's
    # creates all went through, then the largest batch that did (capped).
    create_batch: int = 1
    # Runner Jobs whose create got no answer twice (timeout, reset): still expected, and sent
    # again by name at the next pass (AlreadyExists counts as created). Bounded by the
    # expected names: a name no longer expected is dropped.
    unsure_creates: set[str] = field(default_factory=set)
    # Wall clock: when this process first saw the Secret problem the group reports now
    # (status.STALL_GRACE counts from it).
    secret_since: float | None = None
    logged: tuple[str, str] | None = None
    logged_at: float = 0.0
    teardown_since: float | None = None
    # The UID whose finalizer this process released: a pass on the cache's stale copy (the
    # watch has not shown the object gone yet) must not give up and warn a second time.
    released_uid: str | None = None
    # Runner Job -> the started_at of the first answer that showed its runner busy.
    busy_since: dict[str, float] = field(default_factory=dict)

    def creation_held(self, now: float) -> bool:
        """Whether creation waits out a back-off (``now`` on the monotonic clock): runners
        that could not start, or a create the API server refused (its writer gives the group
        back at once to report it; a pass that created again would loop on refusals)."""
        return now < self.blocked_until or (
            self.create_error is not None and now < self.create_retry_at
        )
