"""The webhook receiver stays cheap to attack: verification before parsing where the secret
is known without the body, a bounded prefix otherwise, bounded concurrent work (429 beyond,
never a 5xx), de-duplication of verified deliveries, 400 for any malformed body (never a
RecursionError), and wake-ups per group rate-limited."""

from __future__ import annotations

import asyncio
import json

from aiohttp.test_utils import TestClient, TestServer

from gitea_runner_operator.webhook.guard import QuietLog
from gitea_runner_operator.webhook.server import PATH
from gitea_runner_operator.webhook.signature import sign
from gitea_runner_operator.webhook.verify import repository_hint, signers
from gitea_runner_operator.webhook.wakes import WakeLimiter
from tests.support.webhook import OPERATOR, SECRETS, A, Harness, body_for


async def test_a_managed_hooks_url_names_the_only_secret_tried_and_nothing_is_parsed():
    h = Harness()
    body = body_for()
    status, _ = await h.post(body, SECRETS[A], params_group="team-a/widgets")
    assert status == 202
    assert h.lookups == [A]  # one secret fetched: the named group's
    assert "team-a/widgets" in h.woken
    h.lookups.clear()
    status, _ = await h.post(b"[" * 4000, b"wrong", params_group="team-a/widgets")
    assert status == 401  # forged: refused without parsing the body at all


async def test_the_operator_secret_is_tried_before_anything_is_parsed_or_fetched():
    h = Harness()
    status, _ = await h.post(body_for(), OPERATOR)
    assert status == 202 and h.lookups == []


async def test_a_deeply_nested_body_is_400_never_a_traceback():
    h = Harness(max_body=1 << 20)
    nested = b"[" * 500_000 + b"]" * 500_000
    status, _ = await h.post(nested[: (1 << 20) - 1], b"wrong")
    assert status == 400
    status, _ = await h.post(b'{"action": "queued", "x": ' + b"[" * 100_000, OPERATOR)
    assert status == 400  # signed by the admin, still malformed: 400


def test_the_repository_is_read_from_a_bounded_prefix_only():
    late = json.dumps(
        {"action": "queued", "pad": "x" * 100_000, "repository": {"full_name": "acme/w"}}
    ).encode()
    assert repository_hint(late) is None  # beyond 64 KiB: not read
    early = body_for()
    hint = repository_hint(early)
    assert hint is not None and hint.full_name == "acme/widgets"


async def test_a_redelivered_verified_delivery_wakes_nobody_again():
    h = Harness()
    body = body_for()
    first, _ = await h.post(body, OPERATOR, **{"X-Gitea-Delivery": "d-1"})
    woken = len(h.woken)
    again, text = await h.post(body, OPERATOR, **{"X-Gitea-Delivery": "d-1"})
    assert (first, again) == (202, 202) and "already seen" in text
    assert len(h.woken) == woken


async def test_a_forger_cannot_burn_a_real_delivery_id():
    h = Harness()
    await h.post(body_for(), b"wrong", **{"X-Gitea-Delivery": "d-2"})
    status, text = await h.post(body_for(), OPERATOR, **{"X-Gitea-Delivery": "d-2"})
    assert status == 202 and "woke" in text


async def test_concurrent_unauthenticated_work_is_bounded_with_429_not_5xx():
    release = asyncio.Event()
    h = Harness()

    async def slow(where):
        await release.wait()
        return SECRETS.get(where)

    h.operator.secret_provider = slow
    h.server._slots = asyncio.Semaphore(2)
    h.server._slot_wait = 0.2
    hdrs = {
        "X-Gitea-Event": "workflow_job",
        "X-Gitea-Signature": sign(b"wrong", body_for()),
        "Content-Type": "application/json",
    }
    async with TestClient(TestServer(h.server.app())) as client:
        posts = [
            asyncio.create_task(client.post(PATH, data=body_for(), headers=hdrs)) for _ in range(6)
        ]
        await asyncio.sleep(0.5)
        release.set()
        statuses = sorted([(await p).status for p in posts])
    assert statuses.count(401) == 2 and statuses.count(429) == 4


async def test_wake_ups_per_group_are_limited_and_the_last_one_is_deferred_not_lost():
    woken: list[str] = []
    now = [0.0]
    limiter = WakeLimiter(woken.append, 0.2, burst=1, clock=lambda: now[0])
    limiter("a")
    limiter("a")
    limiter("a")
    limiter("b")
    assert woken == ["a", "b"]
    now[0] = 0.2
    await asyncio.sleep(0.3)
    assert woken == ["a", "b", "a"]  # one trailing wake for the two within the interval
    limiter.close()


async def test_the_deliveries_of_one_push_wake_the_group_at_once_and_a_flood_waits():
    # Gitea sends one delivery per job, one after the other: a job queued after the first
    # wake-up's refresh started must not wait for the end of the second (issue 27).
    woken: list[str] = []
    now = [0.0]
    limiter = WakeLimiter(woken.append, 0.2, burst=3, clock=lambda: now[0])
    for at in (0.0, 0.01, 0.05):
        now[0] = at
        limiter("a")
    assert woken == ["a", "a", "a"]
    now[0] = 0.06
    limiter("a")
    limiter("a")
    assert woken == ["a", "a", "a"] and limiter.deferred == 1  # a flood: one trailing wake
    await asyncio.sleep(0.3)
    assert woken == ["a", "a", "a", "a"]
    limiter.close()


async def test_a_flood_of_wake_ups_is_held_to_one_per_interval_on_average():
    woken: list[str] = []
    now = [0.0]
    limiter = WakeLimiter(woken.append, 1.0, burst=3, clock=lambda: now[0])
    for step in range(1000):  # 10 s of deliveries, 100 a second
        now[0] = step / 100
        limiter.close()  # count only the ones let through at once, never a trailing one
        limiter("a")
    assert 3 + 9 <= len(woken) <= 3 + 10
    limiter.close()


def test_a_flood_of_rejections_is_one_log_line_then_a_count():
    lines: list[tuple[str, dict]] = []

    class Log:
        def info(self, event: str, **fields: object) -> None:
            lines.append((event, fields))

    now = [0.0]
    quiet = QuietLog(Log(), every=10, clock=lambda: now[0])
    for _ in range(500):
        quiet("webhook delivery rejected", remote="x")
    now[0] = 10.0
    quiet("webhook delivery rejected", remote="x")
    assert [f["suppressed"] for _, f in lines] == [0, 499]


async def test_big_signatures_are_checked_off_the_event_loop_with_the_same_verdict():
    body = b"x" * (1 << 20)
    candidates = [(i, f"s{i}".encode()) for i in range(8)]
    good = sign(b"s5", body)
    assert await signers(candidates, body, bytes.fromhex(good)) == [5]
    assert await signers(candidates, body, bytes(32)) == []


async def test_a_deferred_wake_up_whose_jobs_the_group_listed_meanwhile_is_dropped():
    # The refresh woken by a push's first delivery often lists the jobs of the deliveries
    # that follow it: their deferred wake-up would spend the group's next token on no news
    # and hold the next push's job back by up to a second (issue 27).
    woken: list[str] = []
    listed: set[int] = set()
    limiter = WakeLimiter(
        woken.append, 0.05, burst=1, known=lambda key, job: job in listed, clock=lambda: 0.0
    )
    assert limiter("a", 1) and woken == ["a"]
    assert limiter("a", 2) and limiter("a", 3)  # deferred, one trailing wake for both
    listed.update({1, 2, 3})  # the first wake-up's refresh answered: all three listed
    assert not limiter("a", 3)  # no news: not even deferred
    await asyncio.sleep(0.2)
    assert woken == ["a"] and limiter.dropped == 1
    assert limiter("a", 4) is True  # real news still wakes (now, or when a token is due)
    limiter.close()


async def test_a_deferred_wake_up_still_fires_when_one_of_its_jobs_is_news():
    woken: list[str] = []
    limiter = WakeLimiter(
        woken.append, 0.05, burst=1, known=lambda key, job: job == 2, clock=lambda: 0.0
    )
    limiter("a", 1)
    limiter("a", 2)
    limiter("a", 3)  # not listed: the trailing wake is needed
    await asyncio.sleep(0.2)
    assert woken == ["a", "a"] and limiter.dropped == 0
    limiter.close()


async def test_a_delivery_during_the_groups_refresh_waits_for_its_answer_and_spends_nothing():
    # The refresh in flight usually lists the job (Gitea queued it before delivering it):
    # firing at once would spend a wake-up on a second refresh that brings nothing.
    woken: list[str] = []
    listed: set[int] = set()
    in_flight = [True]
    limiter = WakeLimiter(
        woken.append,
        1.0,
        burst=1,
        known=lambda key, job: job in listed,
        asking=lambda key: in_flight[0],
        clock=lambda: 0.0,
    )
    assert limiter("a", 1)
    await asyncio.sleep(0.05)
    assert woken == []  # still waiting for the answer in flight
    listed.add(1)
    in_flight[0] = False
    await asyncio.sleep(0.05)
    assert woken == [] and limiter.dropped == 1
    in_flight[0] = True
    limiter("a", 2)  # a job the answer will not list
    in_flight[0] = False
    await asyncio.sleep(0.05)
    assert woken == ["a"]  # the group's one token was kept for it
    limiter.close()
