"""Which Secrets the operator may use, and where their tokens may be sent: pure rules.

A RunnerGroup author chooses a Secret name and a Gitea URL; the operator holds `get` on the
Secrets of the namespace. Without these rules, any RunnerGroup could have the operator send
any Secret of its namespace (a database password) as an Authorization header to any URL.
So a Secret must opt in with a label that only someone who may edit Secrets can set, may
name the Gitea base URLs its tokens are for, and the platform admin may restrict Gitea URLs
for everyone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

from gitea_runner_operator.api import constants
from gitea_runner_operator.api.observation import Problem, ProblemKind

CREDENTIALS_LABEL = f"{constants.GROUP}/credentials"
GITEA_URL_ANNOTATION = f"{constants.GROUP}/gitea-url"


def opted_in(labels: Mapping[str, str]) -> bool:
    """Whether a Secret was lent to the operator: the one place this label is checked."""
    return labels.get(CREDENTIALS_LABEL) == "true"


def normalise_url(url: str) -> str:
    """Scheme and host lower-cased, default ports dropped, no trailing slash."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    port = parts.port
    default = {"http": 80, "https": 443}.get(scheme)
    netloc = host if port is None or port == default else f"{host}:{port}"
    if ":" in host:  # IPv6 literal
        netloc = f"[{host}]" if port is None or port == default else f"[{host}]:{port}"
    return f"{scheme}://{netloc}{parts.path.rstrip('/')}"


def url_allowed(url: str, prefixes: Iterable[str]) -> bool:
    """True when ``url`` lies under one of ``prefixes`` (all allowed when there are none).
    Matching is by scheme and host exactly, then by whole path segments, so the prefix
    ``https://gitea.example.com`` does not admit ``https://gitea.example.com.evil.test``."""
    prefixes = list(prefixes)
    if not prefixes:
        return True
    target = normalise_url(url)
    for prefix in prefixes:
        base = normalise_url(prefix)
        if target == base or target.startswith(base + "/"):
            return True
    return False


def url_problem(url: str, prefixes: Iterable[str]) -> Problem | None:
    prefixes = list(prefixes)
    if url_allowed(url, prefixes):
        return None
    return Problem(
        "GiteaURLNotAllowed",
        f"spec.gitea.url: {url} is not under a Gitea URL this operator may call "
        f"(--allowed-gitea-url: {', '.join(prefixes)}); nothing was sent",
        ProblemKind.CONFIG,
    )


# Secret answers that mean a group's credentials are gone for good (a deleted namespace takes
# its Secrets and RoleBindings along), unlike a read that failed this once. A deleting group
# whose credentials are gone is torn down with the token of its last good answer
# (poll/poller.py), and its finalizer goes at once when nothing is left to remove with it.
CREDENTIALS_GONE = frozenset(
    {"SecretNotFound", "SecretKeyMissing", "SecretForbidden", "SecretNotAllowed"}
)


def not_opted_in(namespace: str, name: str) -> str:
    """The sentence for a Secret without the opt-in label, wherever it is named."""
    return f'Secret {namespace}/{name} lacks the label {CREDENTIALS_LABEL}: "true"'


def not_lent_problem(*, field: str, namespace: str, name: str) -> Problem:
    """The answer for a Secret without the opt-in label."""
    return Problem(
        "SecretNotAllowed",
        f"{field}.secretRef: {not_opted_in(namespace, name)}; the operator uses only Secrets "
        "that opt in (ask whoever manages the Secret to add it)",
        ProblemKind.SECRET,
    )


def gitea_url_problem(
    *, field: str, namespace: str, name: str, annotations: Mapping[str, str], gitea_url: str
) -> Problem | None:
    """Why a lent Secret's tokens may not go to ``gitea_url`` (its annotation names other
    Gitea URLs), or None."""
    allowed = annotations.get(GITEA_URL_ANNOTATION)
    if not allowed:
        return None
    urls = [u for u in (p.strip() for p in allowed.split(",")) if u]
    if normalise_url(gitea_url) in {normalise_url(u) for u in urls}:
        return None
    return Problem(
        "SecretNotAllowed",
        f"{field}.secretRef: Secret {namespace}/{name} may be used only for {', '.join(urls)} "
        f"(annotation {GITEA_URL_ANNOTATION}), not for spec.gitea.url {gitea_url}",
        ProblemKind.SECRET,
    )


def secret_problem(
    *,
    field: str,
    namespace: str,
    name: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    gitea_url: str,
) -> Problem | None:
    """Why this Secret may not be used for a group of ``gitea_url``, or None."""
    if not opted_in(labels):
        return not_lent_problem(field=field, namespace=namespace, name=name)
    return gitea_url_problem(
        field=field, namespace=namespace, name=name, annotations=annotations, gitea_url=gitea_url
    )
