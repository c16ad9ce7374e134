"""The one rule for each of: which repositories a scope covers, which jobs a label set fits,
and which repository a job's URL names (api/scope.py). The accounting, the planner and the
webhook router all use these."""

from __future__ import annotations

import pytest

from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.api.scope import (
    ScopeIndex,
    fold,
    labels_fit,
    repository_in_url,
    scope_covers,
)

OFFERED = frozenset({"ubuntu-latest", "linux"})


@pytest.mark.parametrize(
    ("scope", "org", "repo", "owner", "name", "covered"),
    [
        (Scope.GLOBAL, None, None, "anyone", "anything", True),
        (Scope.ORG, "acme", None, "acme", "app", True),
        (Scope.ORG, "Acme", None, "aCME", "app", True),  # Gitea compares lower-cased names
        (Scope.ORG, "acme", None, "other", "app", False),
        (Scope.REPO, "acme", "app", "acme", "app", True),
        (Scope.REPO, "acme", "App", "ACME", "aPP", True),
        (Scope.REPO, "acme", "app", "acme", "lib", False),
        (Scope.REPO, "acme", "app", "other", "app", False),
    ],
)
def test_scope_covers(scope, org, repo, owner, name, covered):
    assert scope_covers(scope, org, repo, owner, name) is covered


@pytest.mark.parametrize(
    ("labels", "fits"),
    [
        (["ubuntu-latest"], True),
        (["ubuntu-latest", "linux"], True),
        ([], True),
        (["ubuntu-latest", "gpu"], False),
        (["Ubuntu-Latest"], False),  # exact, case-sensitive, like Gitea
    ],
)
def test_a_job_fits_only_if_all_its_labels_are_offered(labels, fits):
    assert labels_fit(labels, OFFERED) is fits


@pytest.mark.parametrize(
    ("url", "repository"),
    [
        ("https://g/api/v1/repos/Acme/App/actions/jobs/1", ("Acme", "App")),
        ("https://g/sub/api/v1/repos/acme/app/actions/runs/5/jobs/1", ("acme", "app")),
        ("https://g/api/v1/repos/acme/actions/jobs/1", None),
        ("https://g/api/v1/repos/acme/app/x/actions/jobs/1", None),
        ("https://g/api/v1/orgs/acme/actions/jobs/1", None),
        ("", None),
    ],
)
def test_the_repository_named_by_a_jobs_url(url, repository):
    assert repository_in_url(url) == repository


def test_names_fold_to_lower_case():
    assert fold("AcMe") == "acme" and fold(None) == ""


def test_one_scope_index_finds_who_covers_a_repository_and_who_stands_within_an_org():
    index: ScopeIndex[str] = ScopeIndex()
    assert not index and not index.covers(None) and not index.within("acme")
    index.add(Scope.REPO, "Acme", "Widgets", "team-a/widgets")
    index.add(Scope.REPO, "acme", "widgets", "team-a/widgets")  # the same value: kept once
    index.add(Scope.ORG, "other", None, "team-b/other")
    assert index.covering(("ACME", "widgets")) == ["team-a/widgets"]  # Gitea folds names
    assert index.covering(("acme", "gadgets")) == []
    assert index.covers(("other", "anything")) and not index.covers(("acme", "gadgets"))
    assert index.within("ACME") and index.within("other") and not index.within("third")
    assert sorted(index.covering(None)) == ["team-a/widgets", "team-b/other"]  # unknown: all
    index.add(Scope.GLOBAL, None, None, "ops/everything")
    assert index.covering(("third", "x")) == ["ops/everything"]
    assert index.within("third") and index.covers(("third", "x"))
