"""RunnerGroup objects (as the informer caches them) -> :class:`GroupDescriptor`, for routing.

Parsing a spec with pydantic costs tens of microseconds; with a thousand groups and a delivery
per job state change that adds up, so :class:`Descriptors` remembers each group's descriptor
until its ``metadata.generation`` (which moves with every spec change) does; and
:meth:`Descriptors.since` keeps the whole list until a group event happens, so a flood of
deliveries does not walk every group's object per delivery.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gitea_runner_operator.api.labels import label_names
from gitea_runner_operator.api.runnergroup import InvalidSpec, parse_spec
from gitea_runner_operator.webhook.routing import GroupDescriptor, SecretLocation


def descriptor_from_object(obj: Mapping[str, Any]) -> GroupDescriptor | None:
    """None for a group whose spec is invalid: it has no poller to wake."""
    meta = obj.get("metadata") or {}
    namespace, name = meta.get("namespace"), meta.get("name")
    if not isinstance(namespace, str) or not isinstance(name, str):
        return None
    try:
        spec = parse_spec(obj.get("spec"))
    except InvalidSpec:
        return None
    secret = None
    if spec.webhook is not None:
        ref = spec.webhook.secret_ref
        secret = SecretLocation(namespace, ref.name, ref.key)
    return GroupDescriptor(
        key=f"{namespace}/{name}",
        gitea_url=spec.gitea.url,
        scope=spec.scope,
        org=spec.org,
        repo=spec.repo,
        label_names=label_names(spec.runner_labels),
        webhook_secret=secret,
    )


class Descriptors:
    """A memo of descriptors keyed by uid and generation; call :meth:`of` with the current
    objects each time (groups deleted since are forgotten)."""

    def __init__(self) -> None:
        self._memo: dict[tuple[str, Any], GroupDescriptor | None] = {}
        self._last: tuple[object, int, list[GroupDescriptor]] | None = None

    def since(
        self, source: object, changes: int, objects: Callable[[], Iterable[Mapping[str, Any]]]
    ) -> list[GroupDescriptor]:
        """:meth:`of` the ``objects``, asked for only when ``source`` (the cache) or its count
        of group events ``changes`` moved since the last call; else the same list again."""
        last = self._last
        if last is not None and last[0] is source and last[1] == changes:
            return last[2]
        out = self.of(objects())
        self._last = (source, changes, out)
        return out

    def of(self, objects: Iterable[Mapping[str, Any]]) -> list[GroupDescriptor]:
        memo: dict[tuple[str, Any], GroupDescriptor | None] = {}
        out: list[GroupDescriptor] = []
        for obj in objects:
            meta = obj.get("metadata") or {}
            ident = (
                f"{meta.get('namespace')}/{meta.get('name')}/{meta.get('uid')}",
                meta.get("generation"),
            )
            if ident[1] is not None and ident in self._memo:
                descriptor = self._memo[ident]
            else:
                descriptor = descriptor_from_object(obj)
            memo[ident] = descriptor
            if descriptor is not None:
                out.append(descriptor)
        self._memo = memo
        return out
