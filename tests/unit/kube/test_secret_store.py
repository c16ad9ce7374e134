"""The one Secret reader: every read of a tenant's Secret has the opt-in label checked, a
timeout and a cache, and the data of a Secret that never opted in is not kept."""

import asyncio
import base64
import re
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.api.credentials import CREDENTIALS_LABEL
from gitea_runner_operator.kube.configmaps import ConfigReader, ReferenceProblem
from gitea_runner_operator.kube.secret_store import LentSecret, SecretStore, SecretUnavailable
from gitea_runner_operator.kube.secrets import SecretProblem, Secrets
from gitea_runner_operator.webhook.routing import SecretLocation
from gitea_runner_operator.webhook.secrets import WebhookSecretError, read_secret
from tests.support import REPO_ROOT

PACKAGE = REPO_ROOT / "gitea_runner_operator"
LENT = {CREDENTIALS_LABEL: "true"}


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def secret(data: dict[str, str], labels: dict[str, str] | None = None) -> Any:
    return SimpleNamespace(
        metadata=SimpleNamespace(labels=LENT if labels is None else labels, annotations=None),
        data={k: b64(v) for k, v in data.items()},
    )


class FakeCore:
    """``read_namespaced_secret`` over a dict; ``status`` answers what is not there."""

    def __init__(self, objects: dict[str, Any], status: int = 404) -> None:
        self.objects = objects
        self.status = status
        self.reads = 0
        self.timeouts: list[Any] = []
        self.gate: asyncio.Event | None = None

    async def read_namespaced_secret(self, name: str, namespace: str, **kw: Any) -> Any:
        self.reads += 1
        self.timeouts.append(kw.get("_request_timeout"))
        found = self.objects.get(name)  # the Secret as it was when the GET was sent
        if self.gate is not None:
            await self.gate.wait()
        if found is None:
            raise ApiException(status=self.status)
        return found


def store_over(core: FakeCore, now: list[float] | None = None, **kw: Any) -> SecretStore:
    clock = (lambda: now[0]) if now is not None else None
    store = SecretStore(None, **({"clock": clock} if clock else {}), **kw)
    store._core = core
    return store


async def test_a_lent_secret_is_read_once_per_ttl_with_a_timeout():
    now = [0.0]
    core = FakeCore({"token": secret({"token": "t"})})
    store = store_over(core, now, ttl=60)
    for _ in range(100):  # 100 polls of groups naming the same Secret
        lent = await store.get("team-a", "token", "token")
    assert lent.decoded("token") == b"t"
    assert (core.reads, core.timeouts) == (1, [10.0])
    now[0] = 61
    await store.get("team-a", "token", "token")
    assert core.reads == 2


async def test_a_secret_that_never_opted_in_is_refused_and_its_data_not_kept():
    now = [0.0]
    core = FakeCore({"db": secret({"password": "hunter2"}, labels={CREDENTIALS_LABEL: "yes"})})
    store = store_over(core, now, negative_ttl=5)
    with pytest.raises(SecretUnavailable) as err:
        await store.get("team-a", "db")
    assert err.value.reason == "NotOptedIn"
    assert "hunter2" not in repr(store._answers) and b64("hunter2") not in repr(store._answers)
    # A group naming it cannot turn each poll into a GET...
    for _ in range(50):
        with pytest.raises(SecretUnavailable):
            await store.get("team-a", "db")
    assert core.reads == 1
    # ...and once the label is added, it is seen within the short negative TTL.
    core.objects["db"] = secret({"password": "hunter2"})
    now[0] = 6
    assert (await store.get("team-a", "db", "password")).decoded("password") == b"hunter2"


@pytest.mark.parametrize(("status", "reason"), [(404, "NotFound"), (403, "Forbidden")])
async def test_missing_and_refused_secrets_say_so_and_are_cached_briefly(status, reason):
    now = [0.0]
    core = FakeCore({}, status=status)
    store = store_over(core, now, negative_ttl=5)
    for _ in range(3):
        with pytest.raises(SecretUnavailable) as err:
            await store.get("team-a", "gone")
        assert err.value.reason == reason
    assert core.reads == 1
    now[0] = 5.1
    with pytest.raises(SecretUnavailable):
        await store.get("team-a", "gone")
    assert core.reads == 2


async def test_a_server_error_is_not_cached_and_reaches_the_caller():
    core = FakeCore({}, status=500)
    store = store_over(core)
    for _ in range(2):
        with pytest.raises(ApiException):
            await store.get("team-a", "x")
    assert core.reads == 2 and len(store) == 0


async def test_concurrent_readers_share_one_get_and_one_giving_up_does_not_cancel_the_rest():
    core = FakeCore({"token": secret({"token": "t"})})
    core.gate = asyncio.Event()
    store = store_over(core)
    readers = [asyncio.create_task(store.get("team-a", "token", "token")) for _ in range(50)]
    await asyncio.sleep(0)
    readers[0].cancel()  # its poll hit its deadline
    await asyncio.sleep(0)
    core.gate.set()
    results = await asyncio.gather(*readers[1:])
    assert core.reads == 1
    assert all(r.decoded("token") == b"t" for r in results)
    assert readers[0].cancelled()


async def test_the_cache_is_bounded_and_follows_the_namespaces_that_have_groups():
    core = FakeCore({f"s{i}": secret({"k": "v"}) for i in range(20)})
    store = store_over(core, max_entries=8)
    for i in range(20):
        await store.get(f"ns{i % 4}", f"s{i}")
    assert len(store) == 8
    await store.get("ns3", "s19")  # the newest are kept
    assert core.reads == 20
    store.retain({"ns3"})
    assert len(store) == 2  # s15 and s19 live in ns3
    store.invalidate("ns3", "s19")
    await store.get("ns3", "s19")
    assert core.reads == 21


async def test_lent_values_are_never_in_a_repr():
    lent = LentSecret("a", "b", annotations={}, data={"token": b64("s3cret")})
    assert "s3cret" not in repr(lent) and b64("s3cret") not in repr(lent)
    assert lent.decoded("token") == b"s3cret"
    assert lent.decoded("missing") is None
    assert LentSecret("a", "b", {}, {"k": "!!"}).decoded("k") is None


async def test_every_kind_of_reference_gets_the_same_rule_through_the_one_store():
    """Tokens, webhook secrets and CA bundles: a Secret that did not opt in is refused by all,
    each in its own words naming the reference, and read once between them."""
    core = FakeCore({"db": secret({"k": "v"}, labels={})})
    store = store_over(core)
    with pytest.raises(SecretProblem) as token:
        await Secrets(store).read("team-a", "db", "k", "spec.authToken", "https://g")
    assert token.value.problem.reason == "SecretNotAllowed"
    assert "spec.authToken.secretRef: Secret team-a/db lacks the label" in str(token.value)
    with pytest.raises(WebhookSecretError, match="lacks the label"):
        await read_secret(store, SecretLocation("team-a", "db", "k"))
    with pytest.raises(ReferenceProblem) as ca:
        await ConfigReader(None, store).read_secret_key(
            "team-a", "db", "k", field="spec.gitea.caBundle.secretKeyRef", reason_prefix="CABundle"
        )
    assert ca.value.problem.reason == "CABundleUnusable"
    with pytest.raises(SecretProblem) as mounted:
        await Secrets(store).require_opt_in("team-a", "db", "spec.template.spec.volumes[0]")
    assert mounted.value.problem.reason == "TemplateNotAllowed"
    assert core.reads == 1


async def test_token_messages_name_the_field_and_what_to_do():
    store = store_over(FakeCore({}, status=403))
    with pytest.raises(SecretProblem) as err:
        await Secrets(store).read("team-a", "tok", "token", "spec.authToken", "https://g")
    assert err.value.problem.reason == "SecretForbidden"
    assert "gitea-runner-operator-secrets" in err.value.problem.message
    store = store_over(FakeCore({}, status=404))
    with pytest.raises(
        SecretProblem, match=re.escape("spec.authToken.secretRef: Secret team-a/tok not")
    ):
        await Secrets(store).read("team-a", "tok", "token", "spec.authToken", "https://g")


def test_only_the_store_reads_secrets():
    """One reader: no other module of the operator calls the Secret GET."""
    callers = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if re.search(r"\bread_namespaced_secret\b", path.read_text())
    )
    assert callers == ["kube/secret_store.py"]


async def test_a_read_under_way_when_the_token_is_refused_is_not_remembered():
    """Gitea refused the token (the poller invalidates it) while a read that began before the
    rotation was still out: its old value must not be cached for another minute."""
    core = FakeCore({"token": secret({"token": "old"})})
    core.gate = asyncio.Event()
    store = store_over(core)
    early = asyncio.create_task(store.get("team-a", "token", "token"))
    for _ in range(3):  # the reader, then its shared GET, get their turns: the GET is out
        await asyncio.sleep(0)
    assert core.reads == 1
    store.invalidate("team-a", "token")
    core.objects["token"] = secret({"token": "new"})
    core.gate.set()
    assert (await early).decoded("token") == b"old"  # it answers its own caller
    assert (await store.get("team-a", "token", "token")).decoded("token") == b"new"
    assert core.reads == 2


def kept_value_bytes(store: SecretStore) -> int:
    """The values the store holds on to, in bytes of their base64 text."""
    return sum(
        len(value)
        for entry in store._answers.values()
        if isinstance(entry.answer, LentSecret)
        for value in entry.answer.data.values()
    )


async def test_only_the_keys_in_use_are_kept_and_a_label_check_keeps_no_data():
    big = {f"blob{i}": "x" * 100_000 for i in range(10)}  # 1 MB besides the token
    core = FakeCore({"token": secret({"token": "t", **big}), "mounted": secret(big)})
    store = store_over(core)
    assert (await store.get("team-a", "token", "token")).decoded("token") == b"t"
    assert kept_value_bytes(store) == len(b64("t"))
    assert store.bytes < 1024
    # a template's Secret: whether it may be used, nothing else
    await Secrets(store).require_opt_in("team-a", "mounted", "spec.template.spec.volumes[0]")
    assert kept_value_bytes(store) == len(b64("t"))
    # another key of a Secret is read once more, then both are kept
    assert (await store.get("team-a", "token", "blob1")).decoded("blob1") == b"x" * 100_000
    assert (await store.get("team-a", "token", "token")).decoded("token") == b"t"
    assert (await store.get("team-a", "token", "blob1")).decoded("blob1") == b"x" * 100_000
    assert core.reads == 3
    assert kept_value_bytes(store) == len(b64("t")) + len(b64("x" * 100_000))


async def test_expired_answers_are_dropped_before_the_store_is_full():
    now = [0.0]
    core = FakeCore({f"s{i}": secret({"k": "v"}) for i in range(100)})
    store = store_over(core, now, ttl=60)
    for i in range(100):
        await store.get("team-a", f"s{i}", "k")
    assert len(store) == 100
    now[0] = 61
    await store.get("team-a", "s0", "k")
    assert len(store) == 1


async def test_the_store_is_bounded_in_bytes():
    value = "v" * 3000  # 4,000 bytes of base64
    core = FakeCore({f"s{i}": secret({"k": value}) for i in range(100)})
    core.objects["huge"] = secret({"k": "h" * 100_000})
    store = store_over(core, max_bytes=64 * 1024)
    for i in range(100):
        await store.get("team-a", f"s{i}", "k")
    assert store.bytes <= 64 * 1024
    assert 10 < len(store) < 16  # the newest, as many as fit
    assert (await store.get("team-a", "s99", "k")).decoded("k") == value.encode()
    assert core.reads == 100
    # a value larger than the whole bound is answered, not kept
    assert (await store.get("team-a", "huge", "k")).decoded("k") == b"h" * 100_000
    assert ("team-a", "huge") not in store._answers
    assert store.bytes <= 64 * 1024


def test_each_way_a_secret_cannot_be_used_has_one_sentence():
    """The one table (SecretStore.why_unavailable): a token, a CA bundle and a mounted
    Secret put their field in front of the same words."""
    store = store_over(FakeCore({}))
    said = {
        reason: store.why_unavailable(SecretUnavailable("team-a", "db", reason))
        for reason in ("NotFound", "Forbidden", "NotOptedIn")
    }
    assert said["NotFound"] == "Secret team-a/db not found"
    assert said["Forbidden"].startswith("the operator may not read Secret team-a/db;")
    assert "gitea-runner-operator-secrets" in said["Forbidden"]
    assert said["NotOptedIn"] == f'Secret team-a/db lacks the label {CREDENTIALS_LABEL}: "true"'


@pytest.mark.parametrize(
    ("core", "reason"),
    [
        (FakeCore({}, status=404), "NotFound"),
        (FakeCore({}, status=403), "Forbidden"),
        (FakeCore({"db": secret({"k": "v"}, labels={})}), "NotOptedIn"),
    ],
)
async def test_the_webhook_secret_says_the_tables_sentence(core, reason):
    """--webhook-secret's errors are the table's words, not a wording of their own."""
    store = store_over(core)
    with pytest.raises(WebhookSecretError) as err:
        await read_secret(store, SecretLocation("team-a", "db", "k"))
    assert str(err.value) == store.why_unavailable(SecretUnavailable("team-a", "db", reason))
