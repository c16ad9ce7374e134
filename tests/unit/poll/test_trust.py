"""The CA bundle a group names: parsed into the operator's trust, or a condition that names
the object at fault."""

from __future__ import annotations

import asyncio
import base64
import ssl
import threading
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.api.refs import GiteaRef
from gitea_runner_operator.forge.tls import CABundleError, bundle_id, ssl_context_for
from gitea_runner_operator.kube.configmaps import ConfigReader, ReferenceProblem
from gitea_runner_operator.kube.secret_store import SecretStore
from gitea_runner_operator.poll import trust as trust_module
from gitea_runner_operator.poll.trust import GiteaTrust
from tests.support.builders import TEST_CA
from tests.support.fake_cluster import FakeCore


def test_no_bundle_means_default_verification():
    assert ssl_context_for(None) is True


def test_a_bundle_is_trusted_in_addition_to_the_system():
    context = ssl_context_for(TEST_CA)
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode is ssl.CERT_REQUIRED
    assert context.check_hostname is True
    subjects = [dict(x[0] for x in ca["subject"]) for ca in context.get_ca_certs()]
    assert {"commonName": "gro test CA"} in subjects


@pytest.mark.parametrize(
    ("pem", "message"),
    [
        ("", "holds no PEM certificate"),
        ("just some text", "holds no PEM certificate"),
        (TEST_CA.replace("MII", "xyz"), "is not valid PEM certificate data"),
        ("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "is not valid PEM"),
    ],
)
def test_an_unparsable_bundle_is_a_clear_error(pem, message):
    with pytest.raises(CABundleError, match=message):
        ssl_context_for(pem)


def reader(
    objects: dict[tuple[str, str], Any], status: int = 404, clock: Any = None
) -> ConfigReader:
    fake = FakeCore(objects, status)
    store = SecretStore(None, **({"clock": clock} if clock else {}))
    store._core = fake
    r = ConfigReader(None, store, **({"clock": clock} if clock else {}))
    r._core = fake
    return r


def gitea(kind: str, name: str = "corp-ca", key: str = "ca.pem") -> GiteaRef:
    return GiteaRef.model_validate(
        {"url": "https://g", "caBundle": {kind: {"name": name, "key": key}}}
    )


CM = ("ConfigMap", "corp-ca")
SECRET = ("Secret", "corp-ca")


async def ssl_of(configs: ConfigReader, namespace: str, gitea_ref: GiteaRef) -> Any:
    """aiohttp's ``ssl=`` for the group: True without a bundle, else the context."""
    context, _ = await GiteaTrust(configs).context_for(namespace, gitea_ref)
    return True if context is None else context


async def test_bundle_from_a_config_map_or_a_secret():
    cm = SimpleNamespace(data={"ca.pem": TEST_CA}, binary_data=None)
    secret = opted_in({"ca.pem": base64.b64encode(TEST_CA.encode()).decode()})
    assert isinstance(
        await ssl_of(reader({CM: cm}), "team", gitea("configMapKeyRef")), ssl.SSLContext
    )
    assert isinstance(
        await ssl_of(reader({SECRET: secret}), "team", gitea("secretKeyRef")), ssl.SSLContext
    )
    assert await ssl_of(reader({}), "team", GiteaRef(url="https://g")) is True


def opted_in(data: dict[str, str], labelled: bool = True) -> Any:
    labels = {"gitea.bpg.pw/credentials": "true"} if labelled else {}
    return SimpleNamespace(data=data, metadata=SimpleNamespace(labels=labels))


B64_CA = base64.b64encode(TEST_CA.encode()).decode()
NO_KEY = SimpleNamespace(data={"other": "x"}, binary_data=None)
JUNK = SimpleNamespace(data={"ca.pem": "junk"}, binary_data=None)
CMR, SKR = "configMapKeyRef", "secretKeyRef"


@pytest.mark.parametrize(
    ("objects", "status", "kind", "reason", "message"),
    [
        ({}, 404, CMR, "CABundleNotFound", f"caBundle.{CMR}: ConfigMap team/corp-ca not found"),
        ({}, 404, SKR, "CABundleUnusable", f"caBundle.{SKR}: Secret team/corp-ca cannot be used"),
        ({}, 403, CMR, "CABundleForbidden", "may not read ConfigMap team/corp-ca"),
        ({CM: NO_KEY}, 404, CMR, "CABundleNotFound", "has no key 'ca.pem'"),
        ({CM: JUNK}, 404, CMR, "CABundleInvalid", "ConfigMap team/corp-ca holds no PEM"),
    ],
)  # fmt: skip
async def test_a_missing_or_bad_bundle_is_a_problem_naming_the_object(
    objects, status, kind, reason, message
):
    with pytest.raises(ReferenceProblem) as err:
        await ssl_of(reader(objects, status), "team", gitea(kind))
    assert err.value.problem.reason == reason
    assert message in err.value.problem.message


async def test_other_api_errors_are_not_hidden():
    with pytest.raises(ApiException):
        await ssl_of(reader({}, 500), "team", gitea("configMapKeyRef"))


UNUSABLE = "cannot be used: it must exist, carry the label gitea.bpg.pw/credentials"


@pytest.mark.parametrize(
    "secret",
    [
        None,  # missing
        opted_in({"ca.pem": B64_CA}, labelled=False),  # a real bundle, but not opted in
        opted_in({"other": B64_CA}),  # no such key
        opted_in({"ca.pem": base64.b64encode(b"a database password").decode()}),  # not PEM
    ],
)
async def test_a_secret_bundle_is_used_only_if_opted_in_and_failures_all_read_alike(secret):
    """A RunnerGroup must not tell its author whether a Secret exists or holds PEM: every
    way a Secret cannot serve gives the same reason and message."""
    objects = {} if secret is None else {SECRET: secret}
    with pytest.raises(ReferenceProblem) as err:
        await ssl_of(reader(objects), "team", gitea("secretKeyRef"))
    problem = err.value.problem
    assert problem.reason == "CABundleUnusable"
    assert problem.message == (
        f'spec.gitea.caBundle.secretKeyRef: Secret team/corp-ca {UNUSABLE}: "true" and hold '
        "PEM certificates under key 'ca.pem'"
    )


async def test_a_bundle_is_read_once_per_ttl_with_a_timeout_and_contexts_expire():
    now = [0.0]
    cm = SimpleNamespace(data={"ca.pem": TEST_CA}, binary_data=None)
    configs = reader({CM: cm}, clock=lambda: now[0])
    trust = GiteaTrust(configs, clock=lambda: now[0])
    for _ in range(100):  # 100 polls of groups naming the same bundle
        await trust.context_for("team", gitea("configMapKeyRef"))
    core = configs._core
    assert core.reads == 1 and core.timeouts == [10.0]
    now[0] += 61
    await trust.context_for("team", gitea("configMapKeyRef"))
    assert core.reads == 2 and len(trust) == 1
    now[0] += 700
    trust.expire(600)
    assert len(trust) == 0


def _rewrapped(pem: str, width: int) -> str:
    body = "".join(pem.split("-----")[2].split())
    lines = [body[i : i + width] for i in range(0, len(body), width)]
    return "-----BEGIN CERTIFICATE-----\n" + "\n".join(lines) + "\n-----END CERTIFICATE-----\n"


async def test_groups_trusting_the_same_certificates_share_one_context_whatever_the_text():
    """Each context costs about 0.8 MB (the system's CAs are in it): bundles holding the
    same certificates (other line breaks, order, repeats or comments) share one."""
    variants = [
        TEST_CA,
        "# corp CA, team b's copy\n" + TEST_CA,
        TEST_CA.replace("\n", "\r\n"),
        TEST_CA + TEST_CA,
        _rewrapped(TEST_CA, 76),
    ]
    objects = {
        ("ConfigMap", f"ca-{i}"): SimpleNamespace(data={"ca.pem": pem}, binary_data=None)
        for i, pem in enumerate(variants)
    }
    trust = GiteaTrust(reader(objects))
    got = [
        await trust.context_for(f"team-{i}", gitea("configMapKeyRef", name=f"ca-{i}"))
        for i in range(len(variants))
    ]
    assert len(trust) == 1
    assert len({id(context) for context, _ in got}) == 1
    assert len({trust_id for _, trust_id in got}) == 1
    other = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
    assert bundle_id(TEST_CA + other) == bundle_id(other + TEST_CA) != bundle_id(TEST_CA)


async def test_a_context_is_built_beside_the_event_loop_once_for_the_groups_asking_meanwhile(
    monkeypatch,
):
    """Loading the system's CAs is about 27 ms of CPU: twenty tenants' bundles at once held
    the event loop for every tenant (a turn of 142 ms under issue 45's attacks). It is built
    in a thread of its own, once for the groups asking at once."""
    built_on: list[int] = []

    def recording(pem: str | None) -> ssl.SSLContext | bool:
        built_on.append(threading.get_ident())
        return ssl_context_for(pem)

    monkeypatch.setattr(trust_module, "ssl_context_for", recording)
    objects = {
        ("ConfigMap", f"ca-{i}"): SimpleNamespace(data={"ca.pem": TEST_CA}, binary_data=None)
        for i in range(8)
    }
    trust = GiteaTrust(reader(objects))
    got = await asyncio.gather(
        *(
            trust.context_for(f"team-{i}", gitea("configMapKeyRef", name=f"ca-{i}"))
            for i in range(8)
        )
    )
    assert len({id(context) for context, _ in got}) == 1
    assert len(built_on) == 1
    assert built_on[0] != threading.get_ident()  # not on the event loop's thread
