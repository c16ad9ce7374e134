"""Count the operator's Kubernetes API writes (verb, resource, outcome) for metrics.

Why at the ApiClient: every write (runner Jobs, status, Events, the Lease) goes through
``ApiClient.request``, so one wrapper there sees them all, with the HTTP status that decides
the outcome, without touching each call site. Reads and watches are not counted: they are
the informers' business and would drown the writes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.metrics import kube_outcome

WRITE_VERBS: Final = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
# /api/v1/namespaces/{ns}/{resource}[/{name}[/{subresource}]], or cluster-scoped /{resource}.
_PATH = re.compile(
    r"^/apis?/(?:[^/]+/)?v[^/]+/(?:namespaces/[^/]+/)?(?P<resource>[a-z0-9.-]+)"
    r"(?:/[^/]+(?:/(?P<sub>[a-z]+))?)?/?$"
)

WriteHook = Callable[[str, str, str], None]  # (verb, outcome, resource)


def resource_of(url: str) -> str:
    """``jobs``, ``runnergroups/status``, ``events``, ``leases`` ...; ``other`` if unknown.
    Only the resource type: names and namespaces never become label values."""
    path = url.split("://", 1)[-1]
    path = "/" + path.split("/", 1)[1] if "/" in path else "/"
    path = path.split("?", 1)[0]
    m = _PATH.match(path)
    if m is None:
        return "other"
    return f"{m['resource']}/{m['sub']}" if m["sub"] else m["resource"]


def instrument_writes(api: Any, on_write: WriteHook) -> None:
    """Wrap ``api.request`` (a kubernetes_asyncio ApiClient) so each write calls
    ``on_write(verb, outcome, resource)`` once it is answered or has failed."""
    original = api.request

    async def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        verb = WRITE_VERBS.get(method.upper())
        if verb is None:
            return await original(method, url, *args, **kwargs)
        status: int | None = None
        try:
            response = await original(method, url, *args, **kwargs)
            status = getattr(response, "status", None)
            return response
        except ApiException as exc:
            status = exc.status or None
            raise
        finally:
            on_write(verb, kube_outcome(status), resource_of(url))

    api.request = request
