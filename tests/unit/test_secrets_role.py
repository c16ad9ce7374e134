"""A read that RBAC refused names the ClusterRole to bind by the name this installation gave
it (``--secrets-cluster-role``, which the chart fills from its release name), in one message
for tokens, CA bundles (Secret or ConfigMap) and webhook secrets."""

from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.cli import build_parser, settings_from_args
from gitea_runner_operator.kube.configmaps import ConfigReader, ReferenceProblem
from gitea_runner_operator.kube.secret_store import SecretStore, may_not_read
from gitea_runner_operator.kube.secrets import SecretProblem, Secrets
from gitea_runner_operator.webhook.routing import SecretLocation
from gitea_runner_operator.webhook.secrets import WebhookSecretError, read_secret

ROLE = "acme-gro-gitea-runner-operator-secrets"


class Forbidding:
    """An API server that refuses every read (403), as without a RoleBinding."""

    async def read_namespaced_secret(self, name: str, namespace: str, **kw: Any) -> Any:
        raise ApiException(status=403)

    async def read_namespaced_config_map(self, name: str, namespace: str, **kw: Any) -> Any:
        raise ApiException(status=403)


def store(**kw: Any) -> SecretStore:
    made = SecretStore(None, **kw)
    made._core = Forbidding()
    return made


async def refusals(secrets: SecretStore) -> list[str]:
    reader = ConfigReader(None, secrets)
    reader._core = Forbidding()
    messages = []
    with pytest.raises(SecretProblem) as token:
        await Secrets(secrets).read("team-a", "tok", "token", "spec.authToken", "https://g")
    messages.append(token.value.problem.message)
    with pytest.raises(ReferenceProblem) as ca:
        await reader.read_secret_key(
            "team-a", "ca", "ca.crt", field="spec.gitea.caBundle.secretKeyRef",
            reason_prefix="CABundle",
        )  # fmt: skip
    messages.append(ca.value.problem.message)
    with pytest.raises(ReferenceProblem) as cm:
        await reader.read_config_map_key(
            "team-a", "ca", "ca.crt", field="spec.gitea.caBundle.configMapKeyRef",
            reason_prefix="CABundle",
        )  # fmt: skip
    messages.append(cm.value.problem.message)
    with pytest.raises(WebhookSecretError) as hook:
        await read_secret(secrets, SecretLocation("team-a", "hook", "secret"))
    messages.append(str(hook.value))
    return messages


async def test_every_refusal_names_the_role_this_installation_made():
    messages = await refusals(store(role=ROLE))
    assert len(messages) == 4
    for message in messages:
        assert f"bind the ClusterRole {ROLE} in that namespace" in message
        assert "ClusterRole gitea-runner-operator-secrets" not in message
    # One sentence, whatever was refused: only the object differs.
    assert messages[0].endswith(may_not_read("Secret team-a/tok", ROLE))
    assert messages[1].endswith(may_not_read("Secret team-a/ca", ROLE))
    assert messages[2].endswith(may_not_read("ConfigMap team-a/ca", ROLE))
    assert messages[3] == may_not_read("Secret team-a/hook", ROLE)


async def test_without_the_flag_the_plain_install_names_its_own_role():
    for message in await refusals(store()):
        assert "bind the ClusterRole gitea-runner-operator-secrets in that namespace" in message


def test_the_flag_reaches_the_settings():
    default = settings_from_args(build_parser().parse_args([]))
    assert default.secrets_cluster_role == "gitea-runner-operator-secrets"
    named = settings_from_args(build_parser().parse_args(["--secrets-cluster-role", ROLE]))
    assert named.secrets_cluster_role == ROLE
