"""A group's key, ``namespace/name``, read and written in one place (api/naming.py)."""

from __future__ import annotations

from gitea_runner_operator.api.naming import GroupKey


def test_a_key_reads_as_namespace_and_name_and_writes_back_the_same():
    key = GroupKey.parse("team-a/ci")
    assert key == ("team-a", "ci")
    assert (key.namespace, key.name) == ("team-a", "ci")
    assert str(key) == "team-a/ci"


def test_a_group_object_gives_the_key_the_queue_uses():
    group = {"metadata": {"namespace": "team-a", "name": "ci", "uid": "u1"}}
    assert str(GroupKey.of(group)) == "team-a/ci"
    assert GroupKey.of(group) == GroupKey.parse("team-a/ci")


def test_a_name_is_everything_after_the_first_slash():
    # Kubernetes names hold no slash; a key that did would still keep its namespace whole.
    assert GroupKey.parse("ns/a/b") == ("ns", "a/b")
    assert GroupKey.parse("no-slash") == ("no-slash", "")
