"""What a teardown that gave up leaves behind in Gitea, in words an admin can act on.

A deleting group must never wedge (its namespace would stay Terminating for days), so after
``drainTimeout`` the finalizer goes whatever Gitea says. What could not be removed is then
named, runner by runner and hook by hook, in a Warning Event and the log: the admin who
cleans up by hand needs the names and ids, not "something was left".
"""

from __future__ import annotations

from dataclasses import dataclass

from gitea_runner_operator.api.gitea import ActionRunner

# An Event message is capped by the API server (1 KiB is shown by kubectl); name this many
# registrations and count the rest.
MAX_NAMED = 10


@dataclass(frozen=True, slots=True)
class Leftovers:
    """``registrations`` is None when Gitea was never asked successfully during the
    teardown (what is registered is then unknown, not empty)."""

    registrations: tuple[ActionRunner, ...] | None
    alive_jobs: tuple[str, ...] = ()
    hook_left: bool = False
    hook_id: int | None = None

    @property
    def runner_ids(self) -> list[int]:
        return [r.id for r in self.registrations or ()]

    @property
    def runner_names(self) -> list[str]:
        return [r.name for r in self.registrations or ()]


def describe(left: Leftovers, why: str, *, at_once: bool = False) -> str:
    """One sentence for the Event and the log: why it gave up, then what is left."""
    parts: list[str] = []
    if left.registrations is None:
        parts.append(
            "runner registrations unknown (Gitea could not be asked); look for offline "
            "ephemeral runners named after this group"
        )
    elif left.registrations:
        named = ", ".join(f"{r.name} (id {r.id})" for r in left.registrations[:MAX_NAMED])
        more = len(left.registrations) - MAX_NAMED
        parts.append(f"runner registration(s) {named}" + (f" and {more} more" if more > 0 else ""))
    if left.hook_left:
        parts.append(
            f"webhook (hook id {left.hook_id})"
            if left.hook_id is not None
            else "its managed webhook (target URL names this group)"
        )
    if left.alive_jobs:
        parts.append(
            "runner Job(s) " + ", ".join(left.alive_jobs[:MAX_NAMED]) + " (garbage-collected "
            "with the group)"
        )
    what = "; ".join(parts) if parts else "nothing known"
    return (
        f"gave up {'at once' if at_once else 'after spec.drainTimeout'}: {why}. Left behind "
        f"for a Gitea admin to remove: {what}"
    )
