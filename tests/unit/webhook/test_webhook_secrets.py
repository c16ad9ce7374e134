import base64
import hashlib
import tracemalloc

import pytest

from gitea_runner_operator.cli import build_parser, settings_from_args
from gitea_runner_operator.kube.secret_store import LentSecret
from gitea_runner_operator.manager import operator_webhook_secret
from gitea_runner_operator.webhook.routing import SecretLocation
from gitea_runner_operator.webhook.secrets import (
    CachedSecretReader,
    WebhookSecretError,
    decode_secret,
    parse_secret_location,
    read_secret_file,
)
from gitea_runner_operator.webhook.signature import hmac_key, matches, matching, sign

WHERE = SecretLocation("team-a", "hook", "secret")


def secret(data):
    """A Secret as the store hands it on: only ever one that opted in (the store's own tests
    show that the others never get this far)."""
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return LentSecret("team-a", "hook", annotations={}, data=encoded)


def test_a_labelled_secret_gives_its_trimmed_value():
    assert decode_secret(secret({"secret": "s3cret\n"}), WHERE) == b"s3cret"


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (secret({"other": "x"}), "has no key 'secret'"),
        (secret({"secret": "  "}), "is empty"),
    ],
)
def test_unusable_secrets_say_why(obj, message):
    with pytest.raises(WebhookSecretError, match=message):
        decode_secret(obj, WHERE)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("ops/hooks", SecretLocation("ops", "hooks", "webhook-secret")),
        ("ops/hooks:token", SecretLocation("ops", "hooks", "token")),
    ],
)
def test_secret_flag_syntax(value, expected):
    assert parse_secret_location(value) == expected


@pytest.mark.parametrize("value", ["hooks", "/hooks", "ops/", "a/b/c", ":key"])
def test_bad_secret_flag_is_refused_by_name(value):
    with pytest.raises(WebhookSecretError, match="--webhook-secret"):
        parse_secret_location(value)


def test_secret_file(tmp_path):
    path = tmp_path / "s"
    path.write_text("s3cret\n")
    assert read_secret_file(path) == b"s3cret"
    path.write_text("\n")
    with pytest.raises(WebhookSecretError, match="is empty"):
        read_secret_file(path)
    with pytest.raises(WebhookSecretError, match="cannot read"):
        read_secret_file(tmp_path / "missing")


async def test_reader_caches_values_and_failures_for_the_ttl():
    now = [0.0]
    reads = []
    answers = {WHERE: b"v1"}

    async def read(where):
        reads.append(where)
        if where not in answers:
            raise WebhookSecretError("not found")
        return answers[where]

    reader = CachedSecretReader(None, ttl=60, clock=lambda: now[0], read=read)
    missing = SecretLocation("team-b", "nope", "k")
    assert await reader(WHERE) == b"v1"
    assert await reader(missing) is None
    answers[WHERE] = b"v2"
    now[0] = 59
    assert await reader(WHERE) == b"v1"
    assert await reader(missing) is None
    assert len(reads) == 2
    now[0] = 61
    assert await reader(WHERE) == b"v2"  # a rotated secret is picked up after the ttl


async def test_reader_keeps_the_last_value_when_the_api_server_fails():
    now = [0.0]
    fail = [False]

    async def read(where):
        if fail[0]:
            raise TimeoutError
        return b"v1"

    reader = CachedSecretReader(None, ttl=1, clock=lambda: now[0], read=read)
    assert await reader(WHERE) == b"v1"
    fail[0] = True
    now[0] = 5
    assert await reader(WHERE) == b"v1"


def test_webhook_flags():
    settings = settings_from_args(build_parser().parse_args([]))
    assert settings.webhook_port == 8082
    assert settings.webhook_secret is None
    args = build_parser().parse_args(["--webhook-port", "0", "--webhook-secret", "ops/hooks"])
    assert settings_from_args(args).webhook_port == 0
    with pytest.raises(SystemExit, match="--webhook-secret"):
        settings_from_args(build_parser().parse_args(["--webhook-secret", "nope"]))
    with pytest.raises(SystemExit, match="--webhook-port"):
        settings_from_args(build_parser().parse_args(["--webhook-port", "70000"]))


def test_secret_flags_exclude_each_other(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--webhook-secret", "a/b", "--webhook-secret-file", "/x"])
    assert "not allowed with argument" in capsys.readouterr().err


async def test_operator_secret_comes_from_the_file_or_nowhere(tmp_path):
    path = tmp_path / "secret"
    path.write_text("s3cret\n")
    args = build_parser().parse_args(["--webhook-secret-file", str(path)])
    assert await operator_webhook_secret(settings_from_args(args), None) == b"s3cret"
    assert (
        await operator_webhook_secret(settings_from_args(build_parser().parse_args([])), None)
        is None
    )
    args = build_parser().parse_args(["--webhook-secret-file", str(tmp_path / "missing")])
    with pytest.raises(WebhookSecretError, match="--webhook-secret-file"):
        await operator_webhook_secret(settings_from_args(args), None)


LONG_KEY = bytes(range(256)) * 4096  # 1 MiB
BODY = b'{"action":"queued","repository":{"full_name":"team/app"}}'


def test_a_key_longer_than_a_block_signs_as_its_hash_and_short_keys_stay_as_they_are():
    assert hmac_key(LONG_KEY) == hashlib.sha256(LONG_KEY).digest()
    assert sign(hmac_key(LONG_KEY), BODY) == sign(LONG_KEY, BODY)  # RFC 2104: the same MAC
    assert hmac_key(b"k" * 64) == b"k" * 64
    assert hmac_key(b"short") == b"short"


async def _kept_by(action):
    """Bytes still allocated after ``action()`` ran, whatever it allocated on the way."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        result = await action()
        return result, tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def _decoded(value: bytes) -> bytes:
    """A fresh copy, as decoding the Secret makes one."""
    return bytes(bytearray(value))


async def test_a_one_mib_secret_verifies_the_same_signatures_and_keeps_a_few_hundred_bytes():
    async def read(where):
        return _decoded(LONG_KEY)

    reader = CachedSecretReader(None, read=read)
    await reader(SecretLocation("team", "warm-up", "secret"))  # the cache's own first costs

    async def first_read():
        return await reader(WHERE)

    key, kept = await _kept_by(first_read)
    print(f"kept for a 1 MiB secret: {kept} bytes")
    assert kept <= 512
    assert matches(key, BODY, bytes.fromhex(sign(LONG_KEY, BODY)))
    assert not matches(key, BODY, bytes.fromhex(sign(LONG_KEY + b"x", BODY)))
    assert matching([("group", key)], BODY, bytes.fromhex(sign(LONG_KEY, BODY))) == ["group"]


async def test_two_hundred_groups_with_one_mib_secrets_keep_kilobytes_not_megabytes():
    async def read(where):
        return _decoded(LONG_KEY + where.name.encode())

    reader = CachedSecretReader(None, read=read)

    async def read_all():
        for i in range(200):
            await reader(SecretLocation("team", f"hook-{i}", "secret"))

    _, kept = await _kept_by(read_all)
    print(f"kept for 200 secrets of 1 MiB: {kept} bytes")
    assert kept <= 200 * 512
