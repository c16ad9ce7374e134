"""What the operator knows of a group's own Gitea hook (``spec.webhook.manageHook``)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote


@dataclass(frozen=True, slots=True)
class HookStatus:
    """The outcome of the last attempt to keep the hook; becomes the ``Webhook`` condition."""

    ok: bool
    reason: str
    message: str


def hook_url(delivery_url: str, group_key: str) -> str:
    """The group's own delivery URL: the operator's, with the group named in the query.

        Why per group: Gitea finds hooks by target URL, so two groups of one organisation with
        their own secrets would otherwise keep rewriting one hook, and deleting one group would
        delete the other's hook. The receiver uses the query only to pick the one secret to
    verify with (before parsing anything); the signature decides."""
    sep = "&" if "?" in delivery_url else "?"
    return f"{delivery_url}{sep}group={quote(group_key, safe='')}"
