"""What tenants' ``spec.template`` may ask for: a policy the platform owns.

Runner Pods are created by the operator, with the operator's identity, in namespaces whose
Pod Security level must admit privileged Pods (the default modes run Docker-in-Docker). So
neither Pod Security nor an admission policy that looks at the requester stops a template
from asking for the node: ``hostPath: /``, host namespaces, a privileged sidecar, another
ServiceAccount's token, another team's Secret. This check does, before any Job exists.

The platform chooses with ``--template-policy``: ``restricted`` (the default: everything
below refused), ``permissive`` (all allowed, the behaviour before this policy), or a comma
list of what to allow (``hostPath,nodeName``). ServiceAccounts other than ``default`` are
allowed by name with ``--template-service-account``. What each allowance covers:

- ``hostNamespaces``: ``hostNetwork``, ``hostPID``, ``hostIPC``;
- ``hostPath``: ``hostPath`` volumes;
- ``privileged``: ``privileged: true`` or added capabilities on any container other than the
  mode's own Docker-in-Docker container (``runner`` in ``dind-rootless``, the ``dind``
  sidecar in ``dind``; ``host`` mode has none);
- ``nodeName``: pinning the Pod to a node, past the scheduler;
- ``tolerateAll``: a toleration without a ``key`` and with ``operator: Exists``, which
  tolerates every taint (control-plane nodes, nodes reserved for another team); tolerations
  of named taints stay allowed;
- ``automountToken``: ``automountServiceAccountToken: true`` (the operator sets false), or a
  projected volume with a ``serviceAccountToken`` source (the same token, mounted by hand);
- ``unlabelledSecrets``: Secrets without the opt-in label ``gitea.bpg.pw/credentials``,
  through any field of a Pod that names one (:func:`secret_refs` lists them all; the label is
  checked where the Secret is read). A template naming more than ``MAX_TEMPLATE_SECRETS``
  Secrets is refused, so none is ever left unchecked.

This module only reads the template (a pure function, unit-tested field by field).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

ALLOWANCES: Final = frozenset(
    {
        "hostNamespaces",
        "hostPath",
        "privileged",
        "nodeName",
        "tolerateAll",
        "serviceAccount",
        "automountToken",
        "unlabelledSecrets",
    }
)
DEFAULT_SERVICE_ACCOUNT: Final = "default"
# Distinct Secrets a template may name while they are checked (one read each per poll,
# cached): enough for any runner Pod, and a bound on the reads one group can cause.
MAX_TEMPLATE_SECRETS: Final = 32
# In-tree volume sources that name a Secret in ``secretRef`` (a LocalObjectReference).
_SECRET_REF_VOLUMES: Final = (
    "cephfs",
    "cinder",
    "flexVolume",
    "iscsi",
    "rbd",
    "scaleIO",
    "storageos",
)


class PolicyError(ValueError):
    """A ``--template-policy`` value that names no known allowance."""


@dataclass(frozen=True, slots=True)
class TemplatePolicy:
    allow: frozenset[str] = frozenset()
    service_accounts: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def parse(cls, value: str, service_accounts: Iterable[str] = ()) -> TemplatePolicy:
        value = value.strip()
        if value == "restricted":
            allow: frozenset[str] = frozenset()
        elif value == "permissive":
            allow = ALLOWANCES
        else:
            allow = frozenset(p.strip() for p in value.split(",") if p.strip())
            unknown = sorted(allow - ALLOWANCES)
            if unknown:
                raise PolicyError(
                    f"--template-policy: unknown {', '.join(unknown)}; use restricted, "
                    f"permissive or a comma list of {', '.join(sorted(ALLOWANCES))}"
                )
        return cls(allow, frozenset(service_accounts))

    def allows(self, what: str) -> bool:
        return what in self.allow


RESTRICTED: Final = TemplatePolicy()
PERMISSIVE: Final = TemplatePolicy(ALLOWANCES)


@dataclass(frozen=True, slots=True)
class Refusal:
    """``path`` names the field (``spec.template.spec.volumes[0].hostPath``)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass(frozen=True, slots=True)
class SecretRef:
    path: str
    name: str


ROOT = "spec.template.spec"


def check(template: Any, mode: str, policy: TemplatePolicy) -> Refusal | None:
    """The first thing ``template`` asks for that ``policy`` does not allow, else None.
    ``mode`` is the group's ``spec.mode`` value: it decides which container's privilege is
    the mode's own."""
    spec = template.get("spec") if isinstance(template, Mapping) else None
    if not isinstance(spec, Mapping):
        return None
    for refusal in _refusals(spec, mode, policy):
        return refusal
    if not policy.allows("unlabelledSecrets"):
        return too_many_secrets(secrets_to_check(template))
    return None


def secrets_to_check(template: Any) -> list[SecretRef]:
    """The first reference to each distinct Secret the template names: each is checked once
    for the opt-in label."""
    seen: dict[str, SecretRef] = {}
    for ref in secret_refs(template):
        seen.setdefault(ref.name, ref)
    return list(seen.values())


def too_many_secrets(refs: list[SecretRef]) -> Refusal | None:
    """A template naming more Secrets than are checked is refused, naming the first field
    past the bound, rather than mounted with some of them unchecked."""
    if len(refs) <= MAX_TEMPLATE_SECRETS:
        return None
    return Refusal(
        refs[MAX_TEMPLATE_SECRETS].path,
        f"the template names {len(refs)} Secrets; at most {MAX_TEMPLATE_SECRETS} are checked "
        "for the opt-in label, so runner Pods may name no more",
    )


def _refusals(spec: Mapping[str, Any], mode: str, policy: TemplatePolicy) -> Iterable[Refusal]:
    if not policy.allows("hostNamespaces"):
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            if spec.get(key) is True:
                yield Refusal(f"{ROOT}.{key}", _refused("hostNamespaces"))
    if not policy.allows("nodeName") and spec.get("nodeName"):
        yield Refusal(f"{ROOT}.nodeName", _refused("nodeName"))
    if not policy.allows("tolerateAll"):
        for i, toleration in enumerate(_list(spec.get("tolerations"))):
            if (
                isinstance(toleration, Mapping)
                and not toleration.get("key")
                and toleration.get("operator") == "Exists"
            ):
                yield Refusal(f"{ROOT}.tolerations[{i}]", _refused("tolerateAll"))
    if not policy.allows("serviceAccount"):
        for key in ("serviceAccountName", "serviceAccount"):
            name = spec.get(key)
            if name and name != DEFAULT_SERVICE_ACCOUNT and name not in policy.service_accounts:
                yield Refusal(
                    f"{ROOT}.{key}",
                    f"ServiceAccount {name!r} is not allowed for runner Pods; the platform "
                    "allows 'default' and those named with --template-service-account",
                )
    if not policy.allows("automountToken") and spec.get("automountServiceAccountToken") is True:
        yield Refusal(f"{ROOT}.automountServiceAccountToken", _refused("automountToken"))
    volumes = spec.get("volumes")
    if not policy.allows("automountToken"):
        # A projected token is the same credential as the automounted one, asked for by hand.
        for i, volume in enumerate(_list(volumes)):
            for j, source in enumerate(_list(_get(volume, "projected", "sources"))):
                if _get(source, "serviceAccountToken") is not None:
                    path = f"{ROOT}.volumes[{i}].projected.sources[{j}].serviceAccountToken"
                    yield Refusal(path, _refused("automountToken"))
    if not policy.allows("hostPath") and isinstance(volumes, list):
        for i, volume in enumerate(volumes):
            if isinstance(volume, Mapping) and volume.get("hostPath") is not None:
                yield Refusal(f"{ROOT}.volumes[{i}].hostPath", _refused("hostPath"))
    if not policy.allows("privileged"):
        own = {"dind-rootless": ("containers", "runner"), "dind": ("initContainers", "dind")}
        mine = own.get(mode)
        for kind in ("containers", "initContainers", "ephemeralContainers"):
            containers = spec.get(kind)
            if not isinstance(containers, list):
                continue
            for i, container in enumerate(containers):
                if not isinstance(container, Mapping) or (kind, container.get("name")) == mine:
                    continue
                security = container.get("securityContext")
                if not isinstance(security, Mapping):
                    continue
                path = f"{ROOT}.{kind}[{i}].securityContext"
                if security.get("privileged") is True:
                    yield Refusal(f"{path}.privileged", _refused("privileged"))
                caps = security.get("capabilities")
                if isinstance(caps, Mapping) and caps.get("add"):
                    yield Refusal(f"{path}.capabilities.add", _refused("privileged"))


def secret_refs(template: Any) -> list[SecretRef]:
    """Every reference to a Secret that a Pod spec can carry, by field path: containers'
    ``env`` and ``envFrom`` (init and ephemeral containers too), ``imagePullSecrets``, and the
    volumes (``secret``, projected sources, CSI ``nodePublishSecretRef``, ``azureFile`` and
    the in-tree sources' ``secretRef``). Each must carry the opt-in label unless the policy
    allows ``unlabelledSecrets``. The one list of these fields: keep it complete."""
    spec = template.get("spec") if isinstance(template, Mapping) else None
    if not isinstance(spec, Mapping):
        return []
    refs: list[SecretRef] = []

    def add(path: str, name: Any) -> None:
        if isinstance(name, str) and name:
            refs.append(SecretRef(path, name))

    for kind in ("containers", "initContainers", "ephemeralContainers"):
        for i, container in enumerate(_list(spec.get(kind))):
            base = f"{ROOT}.{kind}[{i}]"
            for j, entry in enumerate(_list(_get(container, "env"))):
                ref = _get(entry, "valueFrom", "secretKeyRef", "name")
                add(f"{base}.env[{j}].valueFrom.secretKeyRef", ref)
            for j, entry in enumerate(_list(_get(container, "envFrom"))):
                add(f"{base}.envFrom[{j}].secretRef", _get(entry, "secretRef", "name"))
    for i, entry in enumerate(_list(spec.get("imagePullSecrets"))):
        add(f"{ROOT}.imagePullSecrets[{i}]", _get(entry, "name"))
    for i, volume in enumerate(_list(spec.get("volumes"))):
        base = f"{ROOT}.volumes[{i}]"
        add(f"{base}.secret", _get(volume, "secret", "secretName"))
        for j, source in enumerate(_list(_get(volume, "projected", "sources"))):
            add(f"{base}.projected.sources[{j}].secret", _get(source, "secret", "name"))
        add(f"{base}.csi.nodePublishSecretRef", _get(volume, "csi", "nodePublishSecretRef", "name"))
        add(f"{base}.azureFile.secretName", _get(volume, "azureFile", "secretName"))
        for source in _SECRET_REF_VOLUMES:
            add(f"{base}.{source}.secretRef", _get(volume, source, "secretRef", "name"))
    return refs


def _refused(what: str) -> str:
    return f"not allowed by the operator's --template-policy (the platform team may allow {what!r})"


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _get(value: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value
