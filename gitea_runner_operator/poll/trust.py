"""Which certificates the operator trusts for a group's Gitea (``spec.gitea.caBundle``).

Reads the bundle (a ConfigMap or Secret key) and builds the TLS context once per distinct
set of certificates (:func:`bundle_id`: not the text, so a copy with other line breaks,
order or comments shares it too), so 1,000 groups behind one internal CA share one context
and one HTTP session.
Contexts are kept by content hash while some group uses them: a bundle's old contents, once
nobody has asked for them for a while, go (with their session, see SessionPool.expire).

A context is built in a thread of its own (kit/offload.py), once for every group asking
meanwhile: loading the system's CAs is about 27 ms of CPU, mostly without the interpreter's
lock, and twenty tenants' bundle variants at once held the event loop for every tenant
(one turn of 142 ms under issue 45's attacks).
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable

from gitea_runner_operator.api.observation import Problem
from gitea_runner_operator.api.refs import GiteaRef
from gitea_runner_operator.forge.tls import CABundleError, bundle_id, ssl_context_for
from gitea_runner_operator.kit.offload import Offload
from gitea_runner_operator.kube.configmaps import ConfigReader, ReferenceProblem, unusable_secret


class GiteaTrust:
    def __init__(self, configs: ConfigReader, clock: Callable[[], float] = time.monotonic) -> None:
        self._configs = configs
        self._clock = clock
        self._contexts: dict[str, ssl.SSLContext] = {}
        self._used: dict[str, float] = {}
        self._builds: Offload[str, ssl.SSLContext | bool] = Offload("tls-context")

    def __len__(self) -> int:
        return len(self._contexts)

    def expire(self, idle: float) -> None:
        """Drop the contexts nobody asked for in ``idle`` seconds."""
        cutoff = self._clock() - idle
        for trust_id in [t for t, at in self._used.items() if at <= cutoff]:
            self._contexts.pop(trust_id, None)
            del self._used[trust_id]

    async def context_for(
        self, namespace: str, gitea: GiteaRef
    ) -> tuple[ssl.SSLContext | None, str]:
        """The context trusting the bundle on top of the system's CAs (None: no bundle), and
        an id for it, so sessions are shared only by groups that trust the same CAs.
        Reasons: CABundleNotFound, CABundleForbidden, CABundleInvalid, CABundleUnusable."""
        bundle = gitea.ca_bundle
        if bundle is None:
            return None, ""
        pem = await self._configs.read_ca_bundle(namespace, bundle)
        trust_id = bundle_id(pem)
        context = self._contexts.get(trust_id)
        if context is None:
            try:
                built = await self._builds.run(trust_id, lambda: ssl_context_for(pem))
            except CABundleError as exc:
                ref = bundle.ref
                if bundle.kind == "Secret":  # say nothing of what a Secret holds
                    raise unusable_secret(
                        "spec.gitea.caBundle.secretKeyRef", namespace, ref.name, ref.key
                    ) from None
                raise ReferenceProblem(
                    Problem(
                        "CABundleInvalid",
                        f"spec.gitea.caBundle: key {ref.key!r} of {bundle.kind} "
                        f"{namespace}/{ref.name} {exc}",
                    )
                ) from None
            assert isinstance(built, ssl.SSLContext)  # a bundle always gives a context
            context = self._contexts[trust_id] = built
        self._used[trust_id] = self._clock()
        return context, trust_id
