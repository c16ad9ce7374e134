"""Tell Gitea from Forgejo, and make the client for the one a group talks to.

``GET /api/forgejo/v1/version`` is routed only by Forgejo (200 ``{"version": …}``); Gitea
answers 404. The token goes along: a Forgejo with ``REQUIRE_SIGNIN_VIEW`` answers 403 to
anonymous callers. ``GET /api/v1/version`` of a Forgejo says ``15.0.3+gitea-1.22.0``, which
must never be compared with Gitea's numbers, so Forgejo's own endpoint is the one read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gitea_runner_operator.api.forge import (
    MIN_FORGEJO_MAJOR,
    Flavor,
    ForgeInfo,
    forgejo_supported,
)
from gitea_runner_operator.api.observation import Problem, ProblemKind
from gitea_runner_operator.forge.client import GiteaClient
from gitea_runner_operator.forge.errors import GiteaNotFound
from gitea_runner_operator.forge.forgejo import ForgejoClient
from gitea_runner_operator.kit.ttlcache import TTLCache

# Detections remembered at most (besides forget(): URLs, tokens and trusts in use).
MAX_KNOWN = 4096
FORGEJO_VERSION_PATH = "/api/forgejo/v1/version"
GITEA_VERSION_PATH = "/api/v1/version"


def _version(body: Any) -> str:
    value = body.get("version") if isinstance(body, dict) else None
    return str(value)[:64] if isinstance(value, str) else ""


async def detect(client: GiteaClient, wanted: Flavor = Flavor.AUTO) -> ForgeInfo:
    """What the server is. With ``wanted`` set, that flavor is taken as given and only its
    version is asked (a failure to read the version is then not fatal)."""
    if wanted is Flavor.FORGEJO:
        try:
            return ForgeInfo(
                Flavor.FORGEJO, _version(await client.call("GET", FORGEJO_VERSION_PATH))
            )
        except GiteaNotFound:
            return ForgeInfo(Flavor.FORGEJO, "", detected=False)
    if wanted is Flavor.AUTO:
        try:
            body = await client.call("GET", FORGEJO_VERSION_PATH)
        except GiteaNotFound:
            pass
        else:
            return ForgeInfo(Flavor.FORGEJO, _version(body))
    try:
        version = _version(await client.call("GET", GITEA_VERSION_PATH))
    except GiteaNotFound:
        version = ""
    return ForgeInfo(Flavor.GITEA, version, detected=wanted is Flavor.AUTO)


def client_for(flavor: Flavor, *args: Any, **kwargs: Any) -> GiteaClient:
    """The client class of ``flavor``, built with :class:`GiteaClient`'s arguments."""
    if flavor is Flavor.FORGEJO:
        return ForgejoClient(*args, **kwargs)
    return GiteaClient(*args, **kwargs)


def forge_problem(info: ForgeInfo, *, has_registration_token: bool) -> Problem | None:
    """Why a group cannot work with this forge, or None."""
    if info.is_forgejo and info.version and not forgejo_supported(info.version):
        return Problem(
            "ForgejoUnsupported",
            f"Forgejo {info.version} is older than {MIN_FORGEJO_MAJOR}: it has no runner "
            "registration API (POST .../actions/runners) and no job handles; upgrade Forgejo",
            ProblemKind.CONFIG,
        )
    if not info.is_forgejo and not has_registration_token:
        return Problem(
            "RegistrationTokenRequired",
            "spec.registrationToken: required for Gitea (the server is Gitea"
            + (f" {info.version}" if info.version else "")
            + "); only Forgejo >= 15 registers each runner through its API",
            ProblemKind.CONFIG,
        )
    return None


class FlavorCache:
    """Detection costs a request, and a server does not turn from Gitea into Forgejo between
    two polls: the answer is kept for ``ttl`` seconds per URL, token and trust settings (an
    upgrade is noticed within that time). Bounded by the URLs in use (:meth:`forget`)."""

    def __init__(self, ttl: float = 600.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._known: TTLCache[tuple[str, str, str, Flavor], ForgeInfo] = TTLCache(
            ttl, max_entries=MAX_KNOWN, clock=clock
        )

    async def info(
        self, client: GiteaClient, wanted: Flavor, key: tuple[str, str, str]
    ) -> ForgeInfo:
        full = (*key, wanted)
        known = self._known.get(full)
        if known is not None:
            return known
        info = await detect(client, wanted)
        self._known.put(full, info)
        return info

    def forget(self, urls_in_use: set[str]) -> None:
        self._known.retain(lambda key: key[0] in urls_in_use)
