import pytest

from gitea_runner_operator.api import constants
from gitea_runner_operator.api.duration import parse_duration
from gitea_runner_operator.api.runnergroup import InvalidSpec, RunnerMode, Scope, parse_spec
from tests.support.builders import spec_with


def test_valid_spec_gets_defaults_and_normalised_url():
    spec = parse_spec(spec_with())
    assert spec.scope is Scope.REPO
    assert spec.gitea.url == "https://gitea.example.com"
    assert spec.image is None
    assert spec.mode is RunnerMode.DIND_USERNS  # the default for new groups (issue 43)
    assert spec.runner_image == constants.PLAIN_IMAGE  # beside the daemon sidecar
    assert spec.startup_timeout_seconds == 600
    assert spec.max_runner_lifetime_seconds is None
    assert spec.poll_interval_seconds == 15
    assert spec.idle_timeout_seconds == 600
    assert spec.target == "acme/widgets"
    assert [label.name for label in spec.runner_labels] == ["ubuntu-latest", "app-infra"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"scope": "org", "org": None, "repo": None}, "org is required when scope is 'org'"),
        ({"repo": None}, "repo is required when scope is 'repo'"),
        ({"scope": "global"}, "must be empty when scope is 'global'"),
        ({"scope": "org"}, "repo must be empty when scope is 'org'"),
        ({"scope": "team"}, "spec.scope"),
        ({"maxActiveRunners": 0}, "spec.maxActiveRunners"),
        ({"gitea": {"url": "ftp://gitea"}}, "spec.gitea.url"),
        (
            {"gitea": {"url": "https://bot:s3cret@gitea"}},
            "spec.gitea.url: must not carry credentials",
        ),
        ({"labels": []}, "spec.labels"),
        ({"labels": ["a", "a:host"]}, "listed twice"),
        ({"pollInterval": "1s"}, "spec.pollInterval: '1s' is outside the allowed range 5s..600s"),
        ({"pollInterval": "soon"}, "spec.pollInterval"),
        ({"idleTimeout": "10s"}, "spec.idleTimeout"),
        ({"authToken": None}, "spec.authToken: Field required"),
        ({"registrationToken": {"secretRef": {"name": "Bad_Name", "key": "k"}}}, "Secret name"),
    ],
)
def test_invalid_specs_name_the_field(changes, message):
    with pytest.raises(InvalidSpec) as err:
        parse_spec(spec_with(**changes))
    assert message in err.value.message


def test_non_object_spec_is_reported_not_crashed():
    with pytest.raises(InvalidSpec, match="must be an object"):
        parse_spec(None)


@pytest.mark.parametrize(
    ("text", "seconds"), [("15s", 15), ("1m30s", 90), ("2h", 7200), ("500ms", 0.5), ("1.5m", 90)]
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


def test_a_kubernetes_label_needs_a_runner_that_understands_it():
    with pytest.raises(InvalidSpec, match=r"^spec\.labels: label .*spec\.labelSchemas"):
        parse_spec(spec_with(labels=["k:kubernetes://img"]))
    spec = parse_spec(
        spec_with(labels=["k:kubernetes://img"], labelSchemas=["host", "docker", "kubernetes"])
    )
    assert [label.name for label in spec.runner_labels] == ["k"]


def test_label_schemas_keep_what_every_runner_knows():
    with pytest.raises(InvalidSpec, match="keep host"):
        parse_spec(spec_with(labelSchemas=["docker"]))


def test_timeouts_have_defaults_and_bounds():
    spec = parse_spec(spec_with())
    assert (spec.startup_timeout_seconds, spec.drain_timeout_seconds) == (600, 300)
    assert parse_spec(spec_with(drainTimeout="0s")).drain_timeout_seconds == 0
    with pytest.raises(InvalidSpec, match=r"spec\.startupTimeout"):
        parse_spec(spec_with(startupTimeout="10s"))


def test_a_template_may_not_set_the_scale_down_guards():
    template = {"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}
    with pytest.raises(InvalidSpec, match="busy runner Pods only"):
        parse_spec(spec_with(template=template))
