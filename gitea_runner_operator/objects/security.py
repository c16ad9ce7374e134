"""The restricted container securityContext, once: what Pod Security ``restricted`` asks of
every container the operator creates (runner Jobs, their config hand-off sidecar, cache
servers)."""

from __future__ import annotations

from typing import Any


def restricted_container_security(uid: int, *, read_only_root: bool = False) -> dict[str, Any]:
    """Non-root as ``uid``, no privilege escalation, no capabilities, the runtime's seccomp
    profile; ``read_only_root`` for containers that write only to their volumes."""
    security: dict[str, Any] = {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if read_only_root:
        security["readOnlyRootFilesystem"] = True
    return security
