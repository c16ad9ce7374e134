"""Errors a Gitea call can end in, each mapped to the condition reason a user will see."""

from __future__ import annotations


class GiteaError(Exception):
    """Base class. ``reason`` is a CamelCase condition reason; str(self) is safe to show."""

    reason = "GiteaError"
    # Text for the operator's own log only (e.g. a socket error), never for status or Events.
    detail: str = ""


class GiteaUnauthorized(GiteaError):
    """401: the auth token is wrong, expired or revoked."""

    reason = "GiteaUnauthorized"


class GiteaForbidden(GiteaError):
    """403: the token is valid but may not see this scope (e.g. not a site admin)."""

    reason = "GiteaForbidden"


class GiteaNotFound(GiteaError):
    """404: the organisation, user or repository does not exist, or the token cannot see it."""

    reason = "GiteaNotFound"


class GiteaUnreachable(GiteaError):
    """No answer: connection failures and timeouts that outlived the retries. The message
    says only that, never the socket error's text: a tenant chooses the URL, and telling
    "refused" from "timed out" would make the operator a port scanner for them."""

    reason = "GiteaUnreachable"


class GiteaServerError(GiteaError):
    """Gitea answered, with a 5xx, on every attempt: it is up but failing."""

    reason = "GiteaServerError"


class GiteaRedirected(GiteaError):
    """A 3xx: never followed, because the token would travel to wherever it points."""

    reason = "GiteaRedirected"


class GiteaRateLimited(GiteaError):
    """429 (or 503 with Retry-After) that outlasted the short waits we allow inside a call;
    ``retry_after`` tells the poll loop how long to stay away."""

    reason = "GiteaRateLimited"

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class GiteaProtocolError(GiteaError):
    """The server answered 2xx with a body we cannot read (not JSON, wrong shape)."""

    reason = "GiteaBadResponse"


class GiteaAnswerTooLarge(GiteaError):
    """An answer past a bound of ``forge/limits.py`` (its bytes, the JSON values it would
    parse into, a page's items, or one observation's bytes or items): read or parsed no
    further, never retried. A tenant chooses the URL, and an unbounded answer would take the
    whole operator (every team) down by memory."""

    reason = "GiteaAnswerTooLarge"


class GiteaTenantBudget(GiteaError):
    """The group's namespace holds its whole share of the operator's memory budget for
    tenants' data (kit/tenant_budget.py) with its groups' answers: this one was read no
    further. The message names the budget and the figures; the group backs off and asks
    again, and other namespaces' groups are not touched."""

    reason = "TenantMemoryBudget"


class GiteaUnsupported(GiteaError):
    """The endpoint is missing although the target exists: Gitea older than 1.25."""

    reason = "GiteaUnsupported"
