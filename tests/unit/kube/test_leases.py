"""The Lease calls: a lost compare-and-swap and a missing Lease are answers, not errors."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.kube.leases import LeaseCalls
from gitea_runner_operator.objects.leases import lease_body
from tests.support.leases import FakeLeases


def test_create_replace_and_a_lost_race() -> None:
    async def scenario() -> None:
        calls = LeaseCalls(FakeLeases(), "ops")
        assert await calls.read("l") is None
        spec = {"holderIdentity": "a", "leaseDurationSeconds": 15}
        first = await calls.write(lease_body("ops", "l", spec))
        assert first is not None
        assert await calls.write(lease_body("ops", "l", spec)) is None  # exists: 409
        second = await calls.write(lease_body("ops", "l", spec, version=first))
        assert second not in (None, first)
        assert await calls.write(lease_body("ops", "l", spec, version=first)) is None  # stale
        read = await calls.read("l")
        assert read is not None and (read.holder, read.version) == ("a", second)

    asyncio.run(scenario())


def test_delete_only_at_the_version_written_and_other_errors_raise() -> None:
    async def scenario() -> None:
        api = FakeLeases()
        calls = LeaseCalls(api, "ops")
        version = await calls.write(lease_body("ops", "l", {"holderIdentity": "a"}))
        assert version is not None
        api.steal("l")
        with pytest.raises(ApiException):
            await calls.delete("l", version)
        assert await calls.read("l") is not None
        api.fail = ApiException(status=500)
        with pytest.raises(ApiException):
            await calls.read("l")

    asyncio.run(scenario())
