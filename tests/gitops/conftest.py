"""The GitOps suite: a real Flux (source-controller, kustomize-controller, built by the
testbed) applies folders of a Git repository on the testbed's Gitea. The shared fixtures, and
one of its own: a team's Git repository as Flux reads it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.support.fixtures import *  # noqa: F403
from tests.testbed.gitea_api import GiteaAPI, GiteaError
from tests.testbed.gitops import SOURCE_API, Flux, git_repository
from tests.testbed.kube import KubeClient
from tests.testbed.pytest_plugin import unique_name


@dataclass
class FluxSource:
    """A private repository on the testbed's Gitea and the GitRepository (with its basic-auth
    Secret) that makes Flux read it, in ``namespace``."""

    flux: Flux
    gitea: GiteaAPI
    owner: str
    repo: str
    namespace: str
    name: str

    def commit(self, files: dict[str, str | None], message: str) -> str:
        """One commit (None deletes a file), then ask Flux to fetch it now; returns the
        revision Flux will report, ``main@sha1:<sha>``."""
        sha = self.gitea.commit_files(self.owner, self.repo, files, message)
        self.flux.reconcile_now(SOURCE_API, "gitrepositories", self.namespace, self.name)
        return f"main@sha1:{sha}"


@pytest.fixture
def flux_source(
    flux: Flux, gitea: GiteaAPI, gitea_org: str, kube: KubeClient, kube_namespace: str
) -> Iterator[FluxSource]:
    """A private Gitea repository read by a GitRepository over HTTP with basic auth."""
    repo = unique_name("gitops")
    gitea.create_repo(gitea_org, repo, private=True)
    flux.basic_auth_secret(kube_namespace, "git-auth")
    source = FluxSource(flux, gitea, gitea_org, repo, kube_namespace, "team-repo")
    flux.apply(
        git_repository(
            kube_namespace, source.name, flux.git_url(gitea_org, repo), secret="git-auth"
        )
    )
    yield source
    with contextlib.suppress(GiteaError):
        gitea.delete(f"/repos/{gitea_org}/{repo}")
