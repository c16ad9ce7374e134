"""The tokens a RunnerGroup names, read through the operator's one :class:`SecretStore`, with
the messages that tell a user which reference to fix.

The store applies the opt-in label, the timeout and the cache; here the token rules are added
(the Secret's ``gitea-url`` annotation, a non-empty key). The poller drops an entry at once
when Gitea rejects the token (401/403), so a rotated token is used on the next poll.
"""

from __future__ import annotations

from gitea_runner_operator.api.credentials import (
    CREDENTIALS_LABEL,
    gitea_url_problem,
    not_lent_problem,
)
from gitea_runner_operator.api.observation import Problem, ProblemError, ProblemKind
from gitea_runner_operator.kube.secret_store import LentSecret, SecretStore, SecretUnavailable


class SecretProblem(ProblemError):
    """A Secret a group names (its token, a Secret its template mounts) that cannot be used."""


class Secrets:
    def __init__(self, store: SecretStore) -> None:
        self.store = store

    def invalidate(self, namespace: str, name: str) -> None:
        self.store.invalidate(namespace, name)

    def retain(self, namespaces: set[str]) -> None:
        self.store.retain(namespaces)

    async def read(self, namespace: str, name: str, key: str, field: str, gitea_url: str) -> str:
        """One decoded value of a Secret that opted in for ``gitea_url``. ``field`` (e.g.
        ``spec.authToken``) goes into errors so a user knows which reference to fix. The
        value itself is never logged."""
        lent = await self._lent(namespace, name, key, field)
        problem = gitea_url_problem(
            field=field,
            namespace=namespace,
            name=name,
            annotations=lent.annotations,
            gitea_url=gitea_url,
        )
        if problem is not None:
            raise SecretProblem(problem)
        where = f"{field}.secretRef: Secret {namespace}/{name}"
        if key not in lent.data:
            raise SecretProblem(
                Problem("SecretKeyMissing", f"{where} has no key {key!r}", ProblemKind.SECRET)
            )
        try:
            value = (lent.decoded(key) or b"").decode().strip()
        except UnicodeDecodeError:
            value = ""
        if not value:
            raise SecretProblem(
                Problem("SecretKeyMissing", f"{where}: key {key!r} is empty", ProblemKind.SECRET)
            )
        return value

    async def require_opt_in(self, namespace: str, name: str, field: str) -> None:
        """A Secret a group's template hands to runner Pods must have opted in like the
        tokens: one team's template must not mount another Secret of the namespace that was
        never lent to the operator. No value is decoded."""
        try:
            await self.store.get(namespace, name)
        except SecretUnavailable as exc:
            if exc.reason != "NotOptedIn":
                raise SecretProblem(self._unavailable(exc, field)) from None
            raise SecretProblem(
                Problem(
                    "TemplateNotAllowed",
                    f"{field}: Secret {namespace}/{name} lacks the label {CREDENTIALS_LABEL}: "
                    '"true"; runner Pods get only Secrets that opt in',
                    ProblemKind.SECRET,
                )
            ) from None

    async def _lent(self, namespace: str, name: str, key: str, field: str) -> LentSecret:
        try:
            return await self.store.get(namespace, name, key)
        except SecretUnavailable as exc:
            raise SecretProblem(self._unavailable(exc, field)) from None

    def _unavailable(self, exc: SecretUnavailable, field: str) -> Problem:
        """SecretNotFound, SecretForbidden, or SecretNotAllowed with how to opt in."""
        if exc.reason == "NotOptedIn":
            return not_lent_problem(field=field, namespace=exc.namespace, name=exc.name)
        message = f"{field}.secretRef: {self.store.why_unavailable(exc)}"
        return Problem(f"Secret{exc.reason}", message, ProblemKind.SECRET)
