"""Exact accounting across groups that could serve the same jobs: each queued job counts for
exactly one group, by a fixed rule (most specific scope, then spare capacity, then name)."""

from gitea_runner_operator.api.gitea import ActionJob
from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.reconcile.capacity.accounting import (
    Answer,
    assign,
    current_jobs,
    headroom,
    job_repository,
    overlaps,
    seen_key,
)
from gitea_runner_operator.reconcile.capacity.families import families
from gitea_runner_operator.reconcile.capacity.ledger import Ledger
from tests.support.claims import group, job, report

ORG = group("team-a/org", Scope.ORG, "acme")
REPO = group("team-b/app", Scope.REPO, "acme", "app")


def counts(assigned):
    return {k: [j.id for j in v] for k, v in assigned.items()}


def test_the_repository_is_read_from_the_jobs_url():
    assert job_repository(job(1, "Acme/App")) == ("acme", "app")
    assert job_repository(ActionJob(id=1, status="queued")) is None
    assert job_repository(ActionJob(id=1, status="queued", url="https://g/api/v1/x")) is None


def test_the_most_specific_scope_takes_its_own_jobs_and_the_org_the_rest():
    jobs = [job(1), job(2), job(3, "acme/other")]
    assert counts(assign(jobs, [ORG, REPO])) == {"team-a/org": [3], "team-b/app": [1, 2]}


def test_every_job_is_counted_exactly_once_whatever_the_order_of_groups():
    jobs = [job(i, "acme/app" if i % 2 else "acme/lib") for i in range(1, 21)]
    for groups in ([ORG, REPO], [REPO, ORG]):
        assigned = assign(jobs, groups)
        ids = sorted(j.id for v in assigned.values() for j in v)
        assert ids == list(range(1, 21))


def test_a_full_first_choice_spills_to_the_next_group():
    full = group("team-b/app", Scope.REPO, "acme", "app", spare=1)
    assert counts(assign([job(1), job(2), job(3)], [ORG, full])) == {
        "team-a/org": [2, 3],
        "team-b/app": [1],
    }


def test_starting_and_idle_runners_count_as_room():
    busy_but_covered = group("team-b/app", Scope.REPO, "acme", "app", spare=0, not_busy=2)
    assert counts(assign([job(1), job(2), job(3)], [ORG, busy_but_covered]))["team-b/app"] == [
        1,
        2,
    ]


def test_when_nobody_has_room_the_first_choice_counts_it_and_shows_at_capacity():
    full_org = group("team-a/org", Scope.ORG, "acme", spare=0)
    full_repo = group("team-b/app", Scope.REPO, "acme", "app", spare=0)
    assert counts(assign([job(1)], [full_org, full_repo])) == {
        "team-a/org": [],
        "team-b/app": [1],
    }


def test_ties_are_broken_by_spare_capacity_then_name():
    a = group("ns/a", Scope.ORG, "acme", spare=2)
    b = group("ns/b", Scope.ORG, "acme", spare=3)
    c = group("ns/c", Scope.ORG, "acme", spare=3)
    assert counts(assign([job(1)], [a, b, c]))["ns/b"] == [1]


def test_jobs_only_one_group_can_run_go_to_it():
    gpu = group("ns/gpu", Scope.ORG, "acme", offered=frozenset({"linux", "gpu"}))
    jobs = [job(1, labels=("linux", "gpu")), job(2)]
    assert counts(assign(jobs, [REPO, gpu])) == {"team-b/app": [2], "ns/gpu": [1]}


def test_overlap_needs_shared_labels_and_intersecting_scopes():
    assert overlaps(ORG, REPO)
    assert not overlaps(ORG, group("x/y", Scope.ORG, "other"))
    assert not overlaps(ORG, group("x/y", Scope.ORG, "acme", offered=frozenset({"win"})))
    assert overlaps(group("x/g", Scope.GLOBAL), REPO)
    assert not overlaps(REPO, group("x/r", Scope.REPO, "acme", "lib"))


def test_a_fresher_answer_that_no_longer_lists_a_job_wins():
    old = Answer(ORG.key, 1.0, [job(1), job(2)])
    new = Answer(REPO.key, 5.0, [job(2)])  # job 1 (acme/app) was taken since the org answer
    assert [j.id for j in current_jobs([old, new], [ORG, REPO])] == [2]
    # A newer org answer that lists only another repository's job: it could see acme/app
    # (sees=None), so job 2 is gone too.
    elsewhere = Answer(ORG.key, 9.0, [job(3, "acme/lib")])
    assert [j.id for j in current_jobs([elsewhere, new], [ORG, REPO])] == [3]


def test_a_blind_peer_hides_no_job_however_fresh_its_answers():
    """On Gitea 1.27 an org-scope token lists only repositories it can read: its silence
    about acme/secret proves nothing, so the job stays demand for the group that sees it."""
    blind = Answer(
        "team-x/org", 99.0, [job(2, "acme/public")], sees=frozenset({seen_key(("acme", "public"))})
    )
    seeing = Answer("team-y/org", 1.0, [job(1, "acme/secret"), job(2, "acme/public")])
    x = group("team-x/org", Scope.ORG, "acme")
    y = group("team-y/org", Scope.ORG, "acme")
    assert [j.id for j in current_jobs([blind, seeing], [x, y])] == [1, 2]
    # Once the blind peer's token was seen listing acme/secret, its silence counts.
    sighted = Answer("team-x/org", 99.0, [], sees=frozenset({seen_key(("acme", "secret"))}))
    assert [j.id for j in current_jobs([sighted, seeing], [x, y])] == [2]


def test_runners_that_exist_in_another_group_cover_jobs_before_new_ones_are_counted():
    """The org group started runners for the repo's jobs before the repo group appeared:
    those runners cover the jobs; the repo group must not start a second set."""
    started = group("team-a/org", Scope.ORG, "acme", spare=6, not_busy=4)
    assert counts(assign([job(1), job(2), job(3), job(4)], [started, REPO])) == {
        "team-a/org": [1, 2, 3, 4],
        "team-b/app": [],
    }


def test_a_group_that_cannot_create_claims_nothing_a_healthy_peer_can_run():
    """Fair claims: a quota-blocked group reports no spare capacity (the reconciler does),
    so every job goes to the healthy group beside it, even though the blocked one is
    larger and would otherwise win the tie on spare capacity."""
    blocked = group("team-x/org", Scope.ORG, "acme", spare=0)
    healthy = group("team-y/org", Scope.ORG, "acme", spare=3)
    assert counts(assign([job(1), job(2), job(3)], [blocked, healthy])) == {
        "team-x/org": [],
        "team-y/org": [1, 2, 3],
    }


# -- families and the ledger ------------------------------------------------------------------


def test_families_join_only_groups_whose_scopes_nest_and_labels_meet():
    from gitea_runner_operator.reconcile.capacity.members import Member

    lib = group("x/lib", Scope.REPO, "acme", "lib")
    other = group("x/o", Scope.ORG, "other")
    win = group("x/win", Scope.ORG, "acme", offered=frozenset({"windows"}))
    everywhere = group("x/g", Scope.GLOBAL, offered=frozenset({"gpu"}))
    members = {
        c.key: Member("https://g.test", c, None) for c in (ORG, REPO, lib, other, win, everywhere)
    }
    fam = families(members)
    assert fam["team-b/app"] == {"team-a/org", "team-b/app", "x/lib"}
    assert fam["x/o"] == {"x/o"}
    assert fam["x/win"] == {"x/win"}
    assert fam["x/g"] == {"x/g"}
    # A global group with the shared label joins every org's family on its instance.
    linux_everywhere = group("x/g", Scope.GLOBAL)
    members["x/g"] = Member("https://g.test", linux_everywhere, None)
    assert families(members)["x/o"] == {"team-a/org", "team-b/app", "x/lib", "x/o", "x/g"}
    # Another instance never joins.
    members["x/g"] = Member("https://other.test", linux_everywhere, None)
    assert families(members)["x/g"] == {"x/g"}


def test_a_group_that_cannot_answer_couples_no_family():
    """A global group whose token does not work (no answer, no runner that could take a
    job) joins nobody: before, every group of its Gitea sharing a label became one family
    (creation median 0.10 -> 0.61 s and 67 quiet passes a second at 1,000 groups)."""
    from gitea_runner_operator.reconcile.capacity.members import Member

    other = group("x/o", Scope.ORG, "other")
    dead = group("x/g", Scope.GLOBAL, not_busy=0)
    members = {c.key: Member("https://g.test", c, Answer(c.key, 1.0, [])) for c in (ORG, other)}
    members["x/g"] = Member("https://g.test", dead, None, failing=True)
    fam = families(members)
    assert (fam["x/g"], fam["x/o"], fam["team-a/org"]) == ({"x/g"}, {"x/o"}, {"team-a/org"})
    # Runners that may take a job couple it still: peers must count them.
    starting = group("x/g", Scope.GLOBAL, not_busy=1)
    members["x/g"] = Member("https://g.test", starting, None, failing=True)
    assert families(members)["x/o"] == {"team-a/org", "x/o", "x/g"}
    # Through the ledger: the family follows the group as its answers stop and come back.
    ledger = Ledger(min_interval=0)
    for c in (ORG, other):
        report(ledger, c, [job(1)])
    ledger.report("https://g.test", dead, None, failing=True)
    assert ledger.share("x/o") is None and not ledger.has_peers("x/o")  # alone: its own answer
    report(ledger, dead, [])
    assert ledger.share("x/o") is not None and ledger.has_peers("x/o")


def test_one_org_group_and_many_repo_groups_sharing_a_label():
    """The common shape: a fallback org pool plus per-repo pools, all offering `linux`.
    Each repo group counts its own repository's jobs; the org group the rest; nothing
    twice; and the assignment runs once per change, not once per group."""
    ledger = Ledger(min_interval=0)
    repos = [group(f"t{i}/r", Scope.REPO, "acme", f"r{i}", spare=2) for i in range(300)]
    org = group("ops/org", Scope.ORG, "acme", spare=1000)
    all_jobs = [job(2 * i + k, f"acme/r{i}") for i in range(300) for k in (0, 1)]
    all_jobs += [job(10_000 + i, "acme/unowned") for i in range(50)]
    report(ledger, org, all_jobs, started=1.0)
    for i, c in enumerate(repos):
        report(ledger, c, [j for j in all_jobs if j.url.endswith(f"/r{i}/actions/jobs/{j.id}")])
    shares = {c.key: ledger.share(c.key) for c in [org, *repos]}
    assert ledger.computations == 1
    assert [j.id for j in shares["t7/r"]] == [14, 15]
    assert sorted(j.id for j in shares["ops/org"]) == list(range(10_000, 10_050))
    counted = sorted(j.id for share in shares.values() for j in share)
    assert counted == sorted(j.id for j in all_jobs)
    # One group's capacity changes: one more computation, and only then.
    report(ledger, group("t7/r", Scope.REPO, "acme", "r7", spare=0, not_busy=2))
    ledger.share("t8/r")
    ledger.share("ops/org")
    assert ledger.computations == 2


def test_a_report_that_changes_nothing_costs_no_computation():
    ledger = Ledger(min_interval=0)
    report(ledger, ORG, [job(1)])
    report(ledger, REPO, [job(1)])
    ledger.share(ORG.key)
    report(ledger, ORG, [job(1)])
    ledger.share(REPO.key)
    assert ledger.computations == 1


def test_a_group_alone_in_its_family_counts_its_own_answer():
    ledger = Ledger(min_interval=0)
    report(ledger, ORG, [job(1)])
    report(ledger, group("x/o", Scope.ORG, "other"), [job(2, "other/x")])
    assert ledger.share(ORG.key) is None
    assert ledger.share("nobody/reported") is None


def test_a_peer_whose_share_grew_is_told():
    told: list[str] = []
    ledger = Ledger(notify=told.append, min_interval=0)
    full = group("team-b/app", Scope.REPO, "acme", "app", spare=0)
    report(ledger, full, [job(1)])
    report(ledger, group("team-a/org", Scope.ORG, "acme", spare=0), [job(1)])
    assert ledger.share("team-b/app") == [job(1)]  # nobody has room: first choice
    report(ledger, group("team-a/org", Scope.ORG, "acme", spare=3), [job(1)])
    assert ledger.share("team-b/app") == []
    assert told == ["team-a/org"]


def test_an_org_answer_learns_which_repositories_its_token_reads():
    """A blind org group never hides a job: the ledger marks an org answer as seeing only
    repositories its token has listed jobs of."""
    ledger = Ledger(min_interval=0)
    blind = group("team-x/org", Scope.ORG, "acme")
    seeing = group("team-y/org", Scope.ORG, "acme", spare=0)
    report(ledger, seeing, [job(1, "acme/secret")], started=1.0)
    report(ledger, blind, [job(2, "acme/public")], started=50.0)
    assert [j.id for j in ledger.share("team-x/org")] == [1, 2]
    ledger.remove("team-x/org")
    assert ledger.share("team-y/org") is None


def test_a_filling_family_is_recomputed_at_most_once_per_interval_and_says_so():
    """While every member creates, each reconcile changes an input; the family's assignment
    is recomputed at most once per interval, and a member reading an older one is told."""
    now = [0.0]
    ledger = Ledger(min_interval=0.5, clock=lambda: now[0])
    report(ledger, ORG, [job(1), job(2, "acme/lib")])
    report(ledger, REPO, [job(1)])
    assert [j.id for j in ledger.share(REPO.key)] == [1]
    for i in range(10):
        report(ledger, group("team-b/app", Scope.REPO, "acme", "app", not_busy=i), [job(1)])
        assert [j.id for j in ledger.share(REPO.key)] == [1]
    assert ledger.computations == 1 and ledger.stale(REPO.key)
    now[0] += 0.6
    ledger.share(ORG.key)
    assert ledger.computations == 2 and not ledger.stale(REPO.key)
    # A newcomer inside the interval counts nothing yet (never twice), and is told to look
    # again.
    report(ledger, group("team-c/lib", Scope.REPO, "acme", "lib"), [job(2, "acme/lib")])
    assert ledger.share("team-c/lib") == [] and ledger.stale("team-c/lib")
    now[0] += 0.6
    assert [j.id for j in ledger.share("team-c/lib")] == [2]


def test_learned_repository_names_are_bounded_in_length_and_count(monkeypatch):
    """An org group learns repository names from its own Gitea's answers, which its tenant
    controls: names no Gitea allows are not learned, and the count is bounded per group and
    for all groups together."""
    import gitea_runner_operator.reconcile.capacity.ledger as ledger_module

    ledger = Ledger(min_interval=0)
    org = group("team-a/org", Scope.ORG, "acme")
    long_names = [job(i, f"acme/{'r' * 1000}{i}") for i in range(2_000)]
    report(ledger, org, [*long_names, job(9, "acme/app"), job(10, "x" * 41 + "/app")])
    assert ledger._seen["team-a/org"] == {seen_key(("acme", "app"))}
    many = [job(i, f"acme/repo-{i}") for i in range(ledger_module.MAX_SEEN_REPOSITORIES + 500)]
    report(ledger, org, many, started=2.0)
    assert len(ledger._seen["team-a/org"]) == ledger_module.MAX_SEEN_REPOSITORIES

    # all groups together: each gets an even share of the total, and gives back the rest
    monkeypatch.setattr(ledger_module, "MAX_SEEN_TOTAL", 20_000)
    shared = Ledger(min_interval=0)
    groups = [group(f"team-{g}/org", Scope.ORG, "acme") for g in range(20)]
    jobs = [job(i, f"acme/repo-{i}") for i in range(3_000)]
    for started in (1.0, 2.0):
        for g in groups:
            report(shared, g, jobs, started=started)
    assert shared.seen_bound() == 1_000
    assert sum(len(seen) for seen in shared._seen.values()) == 20_000


def test_the_learned_repositories_stay_within_their_documented_bytes():
    """MAX_SEEN_TOTAL repositories learned, with the longest names Gitea allows, by 10 org
    groups: the ledger keeps less than its documented bound (before: 86 MiB, against
    "about 45 MB"), measured once the answers are gone."""
    import gc
    import tracemalloc

    from gitea_runner_operator.reconcile.capacity import accounting
    from gitea_runner_operator.reconcile.capacity import ledger as ledger_module

    groups = 10
    per_group = ledger_module.MAX_SEEN_TOTAL // groups
    tracemalloc.start()
    try:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        ledger = Ledger(min_interval=0)
        for g in range(groups):
            owner = f"{g:02d}" + "o" * 38  # 40 characters, 100 for the name
            c = group(f"team-{g}/org", Scope.ORG, owner)
            report(ledger, c, [job(i, f"{owner}/{i:08d}{'r' * 92}") for i in range(per_group)])
            report(ledger, c, [], started=2.0)  # the answer is gone; what was learned stays
        accounting._repository_of.cache_clear()  # the URL memo is bounded on its own
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert sum(len(seen) for seen in ledger._seen.values()) == ledger_module.MAX_SEEN_TOTAL
    print(f"learned repositories: {kept / 2**20:.1f} MiB")
    assert kept < ledger_module.SEEN_BYTES_BOUND


def test_headroom_counts_every_runner_that_could_take_the_groups_jobs():
    """An org group's idle runner may take a repo group's job first (Gitea hands a job to
    whichever runner asks first): the repo group creates only past every such runner."""
    org = group("team-a/org", Scope.ORG, "acme", not_busy=1)
    app = group("team-b/app", Scope.REPO, "acme", "app", not_busy=2)
    jobs = [job(6), job(7), job(8, "acme/lib"), job(9)]
    room = headroom(jobs, [org, app])
    assert room == {"team-b/app": 0, "team-a/org": 1}
    assert headroom([job(1, "acme/lib")], [org, app]) == {"team-a/org": 0, "team-b/app": 0}
    assert headroom([job(1, labels=("gpu",))], [org, app]) == {"team-a/org": 0, "team-b/app": 0}
