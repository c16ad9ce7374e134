"""Which Secrets may be used and where their tokens may go: the tenant-isolation rules."""

import pytest

from gitea_runner_operator.api.credentials import (
    CREDENTIALS_LABEL,
    GITEA_URL_ANNOTATION,
    normalise_url,
    secret_problem,
    url_allowed,
    url_problem,
)

OPTED_IN = {CREDENTIALS_LABEL: "true"}


def problem(labels=None, annotations=None, url="https://gitea.example.com"):
    return secret_problem(
        field="spec.authToken",
        namespace="team-a",
        name="db-creds",
        labels=labels or {},
        annotations=annotations or {},
        gitea_url=url,
    )


def test_a_secret_without_the_opt_in_label_is_refused_naming_secret_and_label():
    p = problem()
    assert p is not None and p.reason == "SecretNotAllowed"
    assert "team-a/db-creds" in p.message and CREDENTIALS_LABEL in p.message
    assert problem(labels={CREDENTIALS_LABEL: "yes"}) is not None  # exactly "true"
    assert problem(labels=OPTED_IN) is None


def test_the_url_annotation_restricts_where_tokens_may_be_sent():
    ann = {GITEA_URL_ANNOTATION: "https://gitea.example.com/, https://git.internal"}
    assert problem(OPTED_IN, ann, "https://GITEA.example.com:443") is None
    assert problem(OPTED_IN, ann, "https://git.internal/") is None
    p = problem(OPTED_IN, ann, "https://attacker.test")
    assert p is not None and "https://attacker.test" in p.message


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://gitea.example.com", True),
        ("https://gitea.example.com/sub", True),
        ("https://gitea.example.com.evil.test", False),
        ("http://gitea.example.com", False),  # scheme matters
        ("https://gitea.example.com:8443", False),
        ("https://other.example.com", False),
    ],
)
def test_allowed_url_prefixes_match_host_exactly_and_whole_path_segments(url, allowed):
    assert url_allowed(url, ["https://gitea.example.com/"]) is allowed


def test_path_prefixes_match_whole_segments():
    assert url_allowed("https://h.test/gitea", ["https://h.test/gitea"])
    assert not url_allowed("https://h.test/gitea-evil", ["https://h.test/gitea"])


def test_no_prefixes_allow_any_url_and_a_refusal_names_the_field():
    assert url_problem("http://anything.test", []) is None
    p = url_problem("http://anything.test", ["https://gitea.example.com/"])
    assert p is not None and p.reason == "GiteaURLNotAllowed"
    assert p.message.startswith("spec.gitea.url")


def test_normalise_url():
    assert normalise_url("HTTPS://Gitea.Example.com:443/x/") == "https://gitea.example.com/x"
    assert normalise_url("http://[::1]:3000") == "http://[::1]:3000"
