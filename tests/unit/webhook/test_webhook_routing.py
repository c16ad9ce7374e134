import pytest

from gitea_runner_operator.api.runnergroup import InvalidSpec, Scope, parse_spec
from gitea_runner_operator.webhook.descriptors import Descriptors, descriptor_from_object
from gitea_runner_operator.webhook.routing import (
    BadDelivery,
    GroupDescriptor,
    Repository,
    SecretLocation,
    instance_of,
    parse_job_delivery,
    parse_repository,
    route,
)

URL = "https://git.example.com"


def group(key, scope=Scope.GLOBAL, org=None, repo=None, labels=("linux",), url=URL):
    return GroupDescriptor(
        key=key,
        gitea_url=url,
        scope=scope,
        org=org,
        repo=repo,
        label_names=frozenset(labels),
    )


def payload(action="queued", full_name="Acme/Widgets", labels=("linux",), html_url=...):
    owner, name = full_name.split("/")
    if html_url is ...:
        html_url = f"{URL}/{full_name}"
    repo = {"full_name": full_name, "name": name, "owner": {"login": owner}}
    if html_url is not None:
        repo["html_url"] = html_url
    return {
        "action": action,
        "repository": repo,
        "workflow_job": {"id": 7, "labels": list(labels), "status": action},
    }


def woken(groups, **kw):
    return route(parse_job_delivery(payload(**kw)), groups)


@pytest.mark.parametrize("action", ["queued", "in_progress", "completed"])
def test_demand_and_capacity_changes_wake(action):
    assert woken([group("ns/g")], action=action) == ["ns/g"]


@pytest.mark.parametrize("action", ["waiting", "requested", "something-new"])
def test_blocked_or_unknown_actions_wake_nobody(action):
    assert woken([group("ns/g")], action=action) == []


def test_scope_decides_which_groups_cover_the_repository():
    groups = [
        group("ns/global"),
        group("ns/org", Scope.ORG, org="acme"),
        group("ns/other-org", Scope.ORG, org="acme-corp"),
        group("ns/repo", Scope.REPO, org="acme", repo="widgets"),
        group("ns/other-repo", Scope.REPO, org="acme", repo="gadgets"),
        group("ns/same-name-other-owner", Scope.REPO, org="umbrella", repo="widgets"),
    ]
    assert woken(groups) == ["ns/global", "ns/org", "ns/repo"]


def test_owner_and_repository_names_compare_case_insensitively():
    groups = [
        group("ns/org", Scope.ORG, org="ACME"),
        group("ns/repo", Scope.REPO, org="acme", repo="WIDGETS"),
    ]
    assert woken(groups, full_name="aCmE/wIdGeTs") == ["ns/org", "ns/repo"]


def test_every_job_label_must_be_offered_exactly():
    groups = [
        group("ns/both", labels=("linux", "gpu")),
        group("ns/linux-only", labels=("linux",)),
        group("ns/upper", labels=("LINUX", "GPU")),
    ]
    assert woken(groups, labels=("linux", "gpu")) == ["ns/both"]


def test_a_job_without_labels_is_covered_by_any_group():
    assert woken([group("ns/g")], labels=()) == ["ns/g"]


def test_each_key_is_woken_once():
    assert woken([group("ns/g"), group("ns/g")]) == ["ns/g"]


@pytest.mark.parametrize(
    ("group_url", "html_url", "wakes"),
    [
        (URL, f"{URL}/Acme/Widgets", True),
        ("HTTPS://GIT.example.com/", f"{URL}/Acme/Widgets", True),
        ("https://git.example.com:443", f"{URL}/Acme/Widgets", True),
        ("https://git.example.com/gitea", "https://git.example.com/gitea/Acme/Widgets", True),
        (URL, "https://git.example.com/gitea/Acme/Widgets", False),  # another sub-path
        ("http://git.example.com", f"{URL}/Acme/Widgets", False),  # another scheme
        ("https://git.example.com:3000", f"{URL}/Acme/Widgets", False),  # another port
        ("https://other.example.com", f"{URL}/Acme/Widgets", False),  # another instance
        (URL, f"{URL}/Acme/Gadgets", False),  # html_url not of this repository: fail closed
        (URL, "not a url", False),
        (URL, None, True),  # the payload does not say which instance sent it
    ],
)
def test_the_sending_instance_must_be_the_groups(group_url, html_url, wakes):
    groups = [group("ns/g", url=group_url)]
    assert woken(groups, html_url=html_url) == (["ns/g"] if wakes else [])


def test_instance_is_root_url_without_the_repository():
    repo = Repository("acme", "widgets", "http://127.0.0.1:3000/sub/acme/widgets/")
    assert instance_of(repo) == ("http", "127.0.0.1", 3000, "/sub")


def test_repository_falls_back_to_owner_login_and_name():
    body = {"repository": {"name": "widgets", "owner": {"login": "acme"}}}
    assert parse_repository(body) == Repository("acme", "widgets")


@pytest.mark.parametrize(
    "body", [None, [], "x", {}, {"repository": "acme/widgets"}, {"repository": {"name": "w"}}]
)
def test_payloads_without_a_repository_name_none(body):
    assert parse_repository(body) is None


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda p: p.pop("action"), "action"),
        (lambda p: p.__setitem__("action", 3), "action"),
        (lambda p: p.pop("repository"), "repository.full_name"),
        (lambda p: p.pop("workflow_job"), "workflow_job"),
        (lambda p: p["workflow_job"].__setitem__("labels", "linux"), "workflow_job.labels"),
        (lambda p: p["workflow_job"].__setitem__("labels", [1]), "workflow_job.labels"),
    ],
)
def test_malformed_deliveries_name_the_field(mutate, field):
    body = payload()
    mutate(body)
    with pytest.raises(BadDelivery, match=f"^{field}:"):
        parse_job_delivery(body)


def runner_group_object(name="ci", generation=1, **spec):
    base = {
        "scope": "org",
        "org": "acme",
        "gitea": {"url": URL + "/"},
        "labels": ["linux:docker://node:20", "app-infra"],
        "maxActiveRunners": 2,
        "registrationToken": {"secretRef": {"name": "t", "key": "r"}},
        "authToken": {"secretRef": {"name": "t", "key": "a"}},
    }
    base.update(spec)
    return {
        "metadata": {"namespace": "team-a", "name": name, "uid": "u1", "generation": generation},
        "spec": base,
    }


def test_descriptor_carries_label_names_and_the_groups_secret_location():
    obj = runner_group_object(webhook={"secretRef": {"name": "hook", "key": "secret"}})
    d = descriptor_from_object(obj)
    assert d == GroupDescriptor(
        key="team-a/ci",
        gitea_url=URL,
        scope=Scope.ORG,
        org="acme",
        repo=None,
        label_names=frozenset({"linux", "app-infra"}),
        webhook_secret=SecretLocation("team-a", "hook", "secret"),
    )


def test_invalid_groups_have_no_descriptor():
    assert descriptor_from_object(runner_group_object(scope="repo")) is None


def test_descriptors_follow_spec_changes_by_generation():
    memo = Descriptors()
    first = memo.of([runner_group_object(labels=["linux"])])
    assert first[0].label_names == {"linux"}
    changed = memo.of([runner_group_object(generation=2, labels=["gpu"])])
    assert changed[0].label_names == {"gpu"}
    assert memo.of([]) == []


def test_deliveries_walk_the_groups_only_after_a_group_event():
    memo, walks = Descriptors(), []
    cache, other = object(), object()

    def objects():
        walks.append(1)
        return [runner_group_object(labels=["linux"])]

    for _ in range(100):  # a flood of deliveries, no group event
        assert memo.since(cache, 7, objects)[0].label_names == {"linux"}
    assert len(walks) == 1
    memo.since(cache, 8, objects)  # a group event
    memo.since(other, 8, objects)  # a new leader's cache
    assert len(walks) == 3


def test_a_bad_webhook_secret_ref_names_the_field():
    spec = runner_group_object(webhook={"secretRef": {"name": "Bad_Name", "key": "k"}})["spec"]
    with pytest.raises(InvalidSpec, match=r"spec\.webhook\.secretRef\.name: 'Bad_Name'"):
        parse_spec(spec)
    spec = runner_group_object(webhook={})["spec"]
    with pytest.raises(InvalidSpec, match=r"spec\.webhook\.secretRef"):
        parse_spec(spec)
