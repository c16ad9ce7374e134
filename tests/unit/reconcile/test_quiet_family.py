"""An unchanged answer of a group with peers is skipped only while its family lists no queued
job (Ledger.must_weigh), and no decision is lost by it: each case runs the same answers
through a ledger that gets every answer (as before) and one that gets only those
``must_weigh`` lets through, and the shares, headroom and peers told must agree."""

from __future__ import annotations

from gitea_runner_operator.api.gitea import ActionJob
from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.reconcile.capacity.accounting import Answer, Claimant
from gitea_runner_operator.reconcile.capacity.ledger import Ledger
from tests.support.claims import group, job

URL = "https://g.test"
A, B = "team-a/app", "team-b/app"  # two repo groups of acme/app: one family


class Pair:
    """The same reports to a ledger that hears every answer and one that skips what
    ``must_weigh`` says it may."""

    def __init__(self) -> None:
        self.told_all: list[str] = []
        self.told_skip: list[str] = []
        self.every = Ledger(notify=self.told_all.append, min_interval=0)
        self.skipping = Ledger(notify=self.told_skip.append, min_interval=0)
        self.skipped = 0

    def answer(self, c: Claimant, jobs: list[ActionJob], started: float) -> None:
        """A poll's answer reaches the reconcile (a report and a read of the share), in the
        skipping ledger only when it changed or must be weighed."""
        self._reconcile(self.every, c, jobs, started)
        member = self.skipping._members.get(c.key)
        unchanged = member is not None and member.answer is not None
        unchanged = unchanged and list(member.answer.jobs) == jobs  # type: ignore[union-attr]
        if unchanged and not self.skipping.must_weigh(c.key, started, bool(jobs)):
            self.skipped += 1
            return
        self._reconcile(self.skipping, c, jobs, started)

    @staticmethod
    def _reconcile(ledger: Ledger, c: Claimant, jobs: list[ActionJob], started: float) -> None:
        ledger.report(URL, c, Answer(c.key, started, jobs))
        ledger.share(c.key)

    def agree(self, *keys: str) -> None:
        for key in keys:
            assert self.skipping.share(key) == self.every.share(key), key
            assert self.skipping.room(key) == self.every.room(key), key
        assert sorted(set(self.told_skip)) == sorted(set(self.told_all))


def _quiet(pair: Pair, polls: int, *claimants: Claimant) -> None:
    for t in range(1, polls + 1):
        for c in claimants:
            pair.answer(c, [], float(t))


def test_a_quiet_family_skips_unchanged_answers_until_one_member_sees_a_job():
    pair = Pair()
    a = group(A, Scope.REPO, "acme", "app")
    b = group(B, Scope.REPO, "acme", "app")
    _quiet(pair, 5, a, b)
    assert pair.skipped == 8  # every answer but each group's first
    pair.answer(b, [job(1)], 6.0)  # B sees a job: the family is no longer quiet
    pair.agree(A, B)
    assert pair.skipping.share(A) == [job(1)]  # the first choice (same scope: by key)
    assert pair.told_skip == [A]
    assert pair.skipping.must_weigh(A, 7.0, False)  # A's fresher silence now counts
    pair.answer(a, [], 7.0)
    pair.agree(A, B)


def test_a_job_picked_up_is_dropped_by_the_fresher_answer_that_was_skipped():
    """B's answer lists job 1 as asked at 10; A was asked at 12 (skipped: the family was
    quiet, B's answer not yet reconciled) and no longer lists it: the job was taken. The
    assignment must weigh A's answer as asked at 12, as if it had been handed over."""
    pair = Pair()
    a = group(A, Scope.REPO, "acme", "app")
    b = group(B, Scope.REPO, "acme", "app")
    _quiet(pair, 3, a, b)
    pair.answer(a, [], 12.0)  # skipped, only its time is recorded
    assert pair.skipped == 5
    pair.answer(b, [job(1)], 10.0)  # B's reconcile, queued earlier, runs now
    pair.agree(A, B)
    assert pair.skipping.share(B) == []  # taken: no runner for it
    assert pair.skipping.room(B) == 0


def test_a_share_that_grows_reaches_the_peer_whose_answers_were_skipped():
    """The org group has room, the repo group none: once the repo group lists jobs, the org
    group's share grows and it is told so, although its own answers were all skipped."""
    pair = Pair()
    org = group("team-a/org", Scope.ORG, "acme", spare=5)
    repo = group(B, Scope.REPO, "acme", "app", spare=0)
    _quiet(pair, 4, org, repo)
    assert pair.skipped == 6
    jobs = [job(1), job(2)]
    pair.answer(repo, jobs, 5.0)
    pair.agree("team-a/org", B)
    assert pair.skipping.share("team-a/org") == jobs
    assert pair.told_skip == ["team-a/org"]


def test_a_group_alone_or_unknown_or_without_an_answer_is_never_weighed_by_age():
    ledger = Ledger(min_interval=0)
    assert ledger.must_weigh(A, 1.0, False)  # not reported yet: treated as shared
    alone = group("x/o", Scope.ORG, "other")
    ledger.report(URL, alone, Answer(alone.key, 1.0, []))
    ledger.share(alone.key)
    assert not ledger.must_weigh(alone.key, 2.0, False)
    b = group(B, Scope.REPO, "acme", "app")
    a = group(A, Scope.REPO, "acme", "app")
    ledger.report(URL, b, None)  # a problem: no answer to weigh
    ledger.report(URL, a, Answer(A, 1.0, []))
    ledger.share(A)
    assert ledger.must_weigh(B, 2.0, False)
    assert ledger.must_weigh(A, 2.0, True)  # an answer that lists a job always counts
    assert not ledger.must_weigh(A, 2.0, False)


def test_a_quiet_family_is_assigned_what_the_accounting_gives_for_no_job():
    """The ledger's shortcut for a family without queued jobs (no assignment is computed)
    gives what the accounting itself gives: empty shares, no headroom, whatever the runners."""
    from gitea_runner_operator.reconcile.capacity.accounting import assign, headroom

    ledger = Ledger(min_interval=0)
    org = group("team-a/org", Scope.ORG, "acme", spare=5, not_busy=2)
    repo = group(B, Scope.REPO, "acme", "app", spare=0, not_busy=1)
    for c in (org, repo):
        ledger.report(URL, c, Answer(c.key, 1.0, []))
    shares = {k: ledger.share(k) for k in (org.key, repo.key)}
    assert shares == assign([], [org, repo])
    assert {k: ledger.room(k) for k in shares} == headroom([], [org, repo])
