"""Fixtures of the real-node suite: Gitea as the real node's Pods reach it, and a team
namespace with the operator running (``real``)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.fixtures import *  # noqa: F403
from tests.support.real_node import Real
from tests.support.testbed import (
    make_tokens,
)


@pytest.fixture(scope="session")
def node_gitea(real_node: Any, cluster: Any) -> str:
    """Gitea's URL as the real node's Pods (and the operator) reach it."""
    port = int(cluster.gitea_url.rsplit(":", 1)[1])
    return f"http://{real_node.expose(port)}"


@pytest.fixture
def real(kube, cluster, team_namespace, gitea_target, start_operator, node_gitea, real_node):
    """Namespace with tokens, the operator running; returns a small helper."""
    make_tokens(kube, team_namespace, cluster, gitea_target)
    op = start_operator(team_namespace)
    return Real(kube, cluster, team_namespace, gitea_target, node_gitea, real_node, op)
