import json

import pytest
import structlog
from aiohttp.test_utils import TestClient, TestServer

from gitea_runner_operator.webhook.server import PATH, WebhookServer
from gitea_runner_operator.webhook.signature import sign
from tests.support.webhook import GROUPS, OPERATOR, SECRETS, A, B, FakeOperator, Harness, body_for


async def test_operator_secret_wakes_every_group_routing_picks():
    h = Harness()
    status, text = await h.post(body_for(), OPERATOR)
    assert status == 202
    assert h.woken == ["team-a/widgets", "team-a/widgets-gpu", "team-b/acme", "ops/everything"]
    assert h.outcomes == ["accepted"]
    assert "woke 4" in text


async def test_an_operator_secret_of_one_mib_signs_as_gitea_signs_with_it():
    long_secret = b"s3cret-" * 150_000
    h = Harness(operator_secret=long_secret)
    status, _ = await h.post(body_for(), long_secret)
    assert status == 202 and len(h.woken) == 4
    status, _ = await h.post(body_for(), long_secret + b"x")
    assert status == 401


@pytest.mark.parametrize(
    "signature", [None, "", "zz" * 32, "ab" * 31, sign(b"guess", body_for()), "sha256=" + "a" * 64]
)
async def test_unsigned_or_wrongly_signed_deliveries_are_401_and_change_nothing(signature):
    h = Harness()
    status, _ = await h.post(body_for(), signature=signature)
    assert status == 401
    assert h.woken == []
    assert h.outcomes == ["unauthorized"]


async def test_a_standby_replica_says_so_instead_of_calling_a_good_signature_wrong():
    leading = [False]
    h = Harness(active=lambda: leading[0])
    status, text = await h.post(body_for(), SECRETS[A])
    assert (status, h.woken, h.outcomes) == (503, [], ["standby"])
    assert "standby" in text
    leading[0] = True  # it took the Lease
    status, _ = await h.post(body_for(), SECRETS[A])
    assert status == 202 and h.woken


async def test_signature_of_another_body_is_rejected():
    h = Harness()
    status, _ = await h.post(body_for(), signature=sign(OPERATOR, body_for(labels=("gpu",))))
    assert status == 401
    assert h.woken == []


async def test_rejected_bodies_are_never_logged():
    h = Harness()
    with structlog.testing.capture_logs() as logs:
        status, _ = await h.post(body_for(marker="SENSITIVE-MARKER"), b"wrong")
    assert status == 401
    assert logs, "the rejection is logged"
    assert "SENSITIVE-MARKER" not in repr(logs)


async def test_a_body_over_the_limit_is_413_and_changes_nothing():
    h = Harness(max_body=1024)
    big = body_for(marker="y" * 2000)
    status, _ = await h.post(big, OPERATOR)
    assert status == 413
    assert h.woken == []
    assert h.outcomes == ["too_large"]


async def test_a_chunked_body_over_the_limit_is_413():
    h = Harness(max_body=1024)
    big = body_for(marker="y" * 2000)

    async def chunks():
        for i in range(0, len(big), 100):
            yield big[i : i + 100]

    async with TestClient(TestServer(h.server.app())) as client:
        resp = await client.post(
            PATH,
            data=chunks(),
            headers={
                "X-Gitea-Event": "workflow_job",
                "X-Gitea-Signature": sign(OPERATOR, big),
                "Content-Type": "application/json",
            },
        )
        assert resp.status == 413
    assert h.woken == []
    assert h.outcomes == ["too_large"]


@pytest.mark.parametrize("event", ["push", "workflow_run", ""])
async def test_other_events_are_ignored_once_verified(event):
    h = Harness()
    status, _ = await h.post(body_for(), OPERATOR, event=event)
    assert status == 204
    assert h.woken == []
    assert h.outcomes == ["ignored"]
    status, _ = await h.post(body_for(), b"wrong", event=event)
    assert status == 401


async def test_a_blocked_job_is_ignored():
    h = Harness()
    status, _ = await h.post(body_for(action="waiting"), OPERATOR)
    assert status == 204
    assert h.woken == []
    assert h.outcomes == ["ignored"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"not json", "body"),
        (
            json.dumps({"action": "queued", "repository": {"full_name": "a/b"}}).encode(),
            "workflow_job",
        ),
    ],
)
async def test_signed_but_malformed_is_400_naming_the_field(body, field):
    h = Harness()
    status, text = await h.post(body, OPERATOR)
    assert status == 400
    assert text.startswith(field)
    assert h.outcomes == ["bad_request"]


async def test_malformed_and_wrongly_signed_is_400_and_unsigned_is_401():
    h = Harness()
    status, _ = await h.post(b"not json", b"wrong")
    assert status == 400  # malformed: read no further, try no group secret
    assert h.lookups == []
    status, _ = await h.post(b"not json")
    assert status == 401


async def test_a_groups_secret_wakes_only_the_groups_holding_it():
    h = Harness()
    status, _ = await h.post(body_for(labels=("linux", "gpu")), SECRETS[A])
    assert status == 202
    # team-b's org group and the global group also cover acme/widgets, but team A's secret
    # does not speak for them.
    assert h.woken == ["team-a/widgets-gpu"]
    h.woken.clear()
    status, _ = await h.post(body_for(), SECRETS[A])
    assert h.woken == ["team-a/widgets", "team-a/widgets-gpu"]


async def test_a_groups_secret_does_not_vouch_outside_its_scope():
    """A hostile team A forging a delivery about another repository with its own secret."""
    h = Harness()
    status, _ = await h.post(body_for(full_name="acme/gadgets"), SECRETS[A])
    assert status == 401
    status, _ = await h.post(body_for(full_name="umbrella/widgets"), SECRETS[A])
    assert status == 401
    assert h.woken == []
    # ...and the lookups only ever asked for secrets of groups covering the named repository.
    assert A not in h.lookups


async def test_an_org_groups_secret_covers_its_repositories():
    h = Harness()
    status, _ = await h.post(body_for(full_name="acme/gadgets"), SECRETS[B])
    assert status == 202
    assert h.woken == ["team-b/acme"]


async def test_each_secret_is_looked_up_once_per_delivery():
    h = Harness()
    await h.post(body_for(), SECRETS[B])
    assert sorted(map(str, h.lookups)) == sorted(map(str, [A, B]))


async def test_an_unreadable_group_secret_vouches_for_nothing():
    h = Harness(secrets={})
    status, _ = await h.post(body_for(), SECRETS[A])
    assert status == 401
    assert h.woken == []


async def test_without_an_operator_secret_only_group_secrets_count():
    h = Harness(operator_secret=None)
    status, _ = await h.post(body_for(), OPERATOR)
    assert status == 401
    status, _ = await h.post(body_for(), SECRETS[B])
    assert status == 202


async def test_an_empty_secret_never_vouches():
    h = Harness(operator_secret=b"", secrets={A: b"", B: b""})
    status, _ = await h.post(body_for(), b"")
    assert status == 401


async def test_a_failing_wake_does_not_fail_the_delivery():
    woken = []

    def wake(key):
        woken.append(key)
        raise RuntimeError("boom")

    server = WebhookServer(
        "127.0.0.1", 0, FakeOperator(GROUPS, on_wake=wake), operator_secret=OPERATOR
    )
    body = body_for()
    async with TestClient(TestServer(server.app())) as client:
        resp = await client.post(
            PATH,
            data=body,
            headers={
                "X-Gitea-Event": "workflow_job",
                "X-Gitea-Signature": sign(OPERATOR, body),
                "Content-Type": "application/json",
            },
        )
        assert resp.status == 202
    assert len(woken) == 4


async def test_instance_mismatch_is_explained_to_a_verified_sender():
    h = Harness()
    body = json.dumps(
        {
            "action": "queued",
            "repository": {
                "full_name": "acme/widgets",
                "html_url": "http://gitea:3000/acme/widgets",
            },
            "workflow_job": {"labels": ["linux"]},
        }
    ).encode()
    status, text = await h.post(body, OPERATOR)
    assert status == 202
    assert h.woken == []
    assert "ROOT_URL" in text


async def test_the_server_listens_and_stops():
    h = Harness()
    await h.server.start()
    try:
        assert h.server.port > 0
    finally:
        await h.server.stop()


async def test_a_queued_delivery_for_a_job_the_group_already_listed_wakes_nobody():
    # Gitea delivers a job a few hundred ms after queueing it: the refresh woken by an
    # earlier delivery of the same push often lists it already. Waking again would spend
    # one of the group's few wake-ups a second on no news (issue 27).
    listed = {("team-a/widgets", 7)}
    h = Harness(known=lambda key, job_id: (key, job_id) in listed)
    status, _ = await h.post(body_for(job_id=7), OPERATOR)
    assert status == 202
    assert "team-a/widgets" not in h.woken
    h.woken.clear()
    status, _ = await h.post(body_for(job_id=8), OPERATOR)  # not listed yet: news
    assert "team-a/widgets" in h.woken
    h.woken.clear()
    status, _ = await h.post(body_for(job_id=7, action="completed"), OPERATOR)
    assert "team-a/widgets" in h.woken  # a freed slot is news whatever the last answer said


async def test_a_verified_delivery_vouches_for_every_group_its_secret_covers():
    # The evidence the poll interval follows (api/cadence.py): team-a's hook delivered a job
    # for labels only one of its groups has; both of its groups' hooks demonstrably work.
    h = Harness()
    status, _ = await h.post(body_for(labels=("linux", "gpu"), job_id=41), SECRETS[A])
    assert status == 202 and h.woken == ["team-a/widgets-gpu"]
    assert sorted(h.operator.heard_for) == [("team-a/widgets", 41), ("team-a/widgets-gpu", 41)]


async def test_a_delivery_signed_by_another_secret_vouches_for_no_group_hook():
    h = Harness()
    status, _ = await h.post(body_for(action="completed", job_id=5), SECRETS[B])
    assert status == 202
    # team-b's hook works: no job announced (only queued deliveries announce one).
    assert h.operator.heard_for == [("team-b/acme", None)]
