"""Capacity domains: groups that could count the same job always land in one domain, and
groups of different Gitea instances never share one."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.reconcile.capacity.accounting import Claimant, overlaps
from gitea_runner_operator.sharding.domains import Shape, domain_id, domains, fingerprint

URLS = ("https://a.example", "https://b.example")


def shape(
    key: str,
    scope: Scope,
    org: str | None = None,
    repo: str | None = None,
    labels: tuple[str, ...] = ("x",),
    url: str = URLS[0],
) -> Shape:
    return Shape(key, url, scope, org, repo, frozenset(labels))


def claimant(s: Shape) -> Claimant:
    return Claimant(s.key, s.scope, s.org, s.repo, s.labels, not_busy=0, spare=0)


@st.composite
def shapes(draw: st.DrawFn) -> list[Shape]:
    n = draw(st.integers(1, 12))
    out = []
    for i in range(n):
        scope = draw(st.sampled_from(list(Scope)))
        org = None if scope is Scope.GLOBAL else draw(st.sampled_from(["acme", "beta"]))
        repo = draw(st.sampled_from(["app", "lib"])) if scope is Scope.REPO else None
        labels = draw(st.sets(st.sampled_from(["x", "y", "z", "w"]), min_size=1, max_size=2))
        url = draw(st.sampled_from(URLS))
        out.append(shape(f"ns/g{i:02d}", scope, org, repo, tuple(labels), url))
    return out


@settings(max_examples=300, deadline=None)
@given(shapes())
def test_groups_that_could_count_one_job_share_a_domain(groups: list[Shape]) -> None:
    found = domains(groups)
    assert set(found) == {s.key for s in groups}
    for a in groups:
        assert a.key in found[a.key].members
        for b in groups:
            if a.url == b.url and overlaps(claimant(a), claimant(b)):
                assert found[a.key] == found[b.key], (a, b)
            if a.url != b.url:
                assert found[a.key].id != found[b.key].id, (a, b)


@settings(max_examples=200, deadline=None)
@given(shapes())
def test_a_global_group_makes_its_gitea_one_domain(groups: list[Shape]) -> None:
    found = domains(groups)
    for url in URLS:
        here = [s for s in groups if s.url == url]
        if any(s.scope is Scope.GLOBAL for s in here):
            assert len({found[s.key].id for s in here}) == 1
            assert all(found[s.key].whole_gitea for s in here)


def test_groups_that_cannot_compete_are_apart() -> None:
    groups = [
        shape("ns/app", Scope.REPO, "acme", "app"),
        shape("ns/lib", Scope.REPO, "acme", "lib"),
        shape("ns/gpu", Scope.ORG, "acme", labels=("gpu",)),
        shape("ns/other", Scope.ORG, "beta"),
    ]
    found = domains(groups)
    assert len({d.id for d in found.values()}) == 4
    assert not any(d.whole_gitea for d in found.values())


def test_an_org_group_joins_its_repositories_and_the_id_follows_the_smallest_key() -> None:
    groups = [
        shape("ns/b-app", Scope.REPO, "acme", "app"),
        shape("ns/c-lib", Scope.REPO, "acme", "lib"),
        shape("ns/d-org", Scope.ORG, "acme"),
    ]
    found = domains(groups)
    assert found["ns/b-app"].members == {"ns/b-app", "ns/c-lib", "ns/d-org"}
    assert found["ns/b-app"].id == domain_id(["ns/b-app"])
    # A global group with a label nobody else offers still joins the whole Gitea.
    wider = domains([*groups, shape("ns/a-top", Scope.GLOBAL, labels=("arm",))])
    assert wider["ns/c-lib"].members == {"ns/a-top", "ns/b-app", "ns/c-lib", "ns/d-org"}
    assert wider["ns/c-lib"].id == domain_id(["ns/a-top"])


def test_the_fingerprint_changes_with_what_decides_domains_only() -> None:
    a = [shape("ns/a", Scope.ORG, "acme"), shape("ns/b", Scope.REPO, "acme", "app")]
    assert fingerprint(a) == fingerprint(list(reversed(a)))
    assert fingerprint(a) != fingerprint([a[0], shape("ns/b", Scope.REPO, "acme", "lib")])
    assert fingerprint(a) != fingerprint([a[0]])
