import pytest

from gitea_runner_operator.api.labels import LabelError, RunnerLabel, Schema, label_names


@pytest.mark.parametrize(
    ("raw", "name", "schema", "arg"),
    [
        ("ubuntu-latest", "ubuntu-latest", None, None),
        (
            "ubuntu-22.04:docker://node:20-bookworm",
            "ubuntu-22.04",
            Schema.DOCKER,
            "//node:20-bookworm",
        ),
        ("self-hosted:host", "self-hosted", Schema.HOST, None),
        ("k8s:kubernetes://busybox:1.36", "k8s", Schema.KUBERNETES, "//busybox:1.36"),
    ],
)
def test_parse_splits_name_from_schema_like_the_runner(raw, name, schema, arg):
    label = RunnerLabel.parse(raw, set(Schema))
    assert (label.name, label.schema, label.arg, label.raw) == (name, schema, arg, raw)


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ("", "empty name"),
        (":host", "empty name"),
        (" linux", "white space"),
        ("a,b", "comma"),
        ("linux:host:extra", "takes no argument"),
        ("linux:docker", "needs an image"),
        ("linux:docker:node", "needs an image"),
        ("linux:kubernetes://", "needs an image"),
        ("k:kubernetes://img", "spec.labelSchemas"),  # not declared: the runner refuses it
        # The real runner (v1.0.8) splits at the first colon and refuses any schema it does
        # not know: `register --labels app:infra` exits 1 with "unsupported schema: infra".
        ("app:infra", "unsupported schema"),
        ("app:infra:docker://alpine", "unsupported schema"),
        ("app:infra:host", "unsupported schema"),
        ("app:hostile", "unsupported schema"),
    ],
)
def test_parse_rejects_labels_the_runner_would_refuse(raw, fragment):
    with pytest.raises(LabelError, match=fragment):
        RunnerLabel.parse(raw)


def test_label_names_are_what_gitea_matches():
    labels = [RunnerLabel.parse(r) for r in ["a:docker://x", "b:host", "c"]]
    assert label_names(labels) == {"a", "b", "c"}
