"""Errors a Gitea call can end in, each mapped to the condition reason a user will see."""

from __future__ import annotations


class GiteaError(Exception):
    """Base class. ``reason`` is a CamelCase condition reason; str(self) is safe to show."""

    reason = "GiteaError"


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
    """Connection failures and 5xx answers that outlived the retries."""

    reason = "GiteaUnreachable"


class GiteaRateLimited(GiteaError):
    """429/503 with a Retry-After longer than we are willing to wait inside one call."""

    reason = "GiteaRateLimited"

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class GiteaProtocolError(GiteaError):
    """The server answered 2xx with a body we cannot read (not JSON, wrong shape)."""

    reason = "GiteaBadResponse"


class GiteaUnsupported(GiteaError):
    """The endpoint is missing although the target exists: Gitea older than 1.25."""

    reason = "GiteaUnsupported"
