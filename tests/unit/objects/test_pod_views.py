"""What the operator reads from a runner Pod's status, in the shapes a real kubelet writes
(seen on the testbed's real node: tests/real_node/test_real_node.py)."""

from __future__ import annotations

from typing import Any

from gitea_runner_operator.objects.views import pod_problem


def pod(init: list[dict[str, Any]] | None = None, main: list[dict[str, Any]] | None = None):
    return {
        "metadata": {"name": "ci-abc-x1"},
        "status": {"initContainerStatuses": init or [], "containerStatuses": main or []},
    }


def waiting(name: str, reason: str, message: str = "") -> dict[str, Any]:
    return {"name": name, "state": {"waiting": {"reason": reason, "message": message}}}


def test_an_image_that_is_not_on_the_node_and_may_not_be_pulled_is_a_problem():
    message = 'Container image "docker.io/local/nope:1" is not present with pull policy of Never'
    problem = pod_problem(pod(main=[waiting("runner", "ErrImageNeverPull", message)]))
    assert problem == f"Pod ci-abc-x1: ErrImageNeverPull: {message}"


def test_a_stuck_init_container_is_the_pods_problem_while_the_runner_only_waits():
    # host mode: gro-register runs first; DinD: the dind sidecar. The runner container says
    # PodInitializing meanwhile, which is not a problem of its own.
    stuck = pod(
        init=[waiting("gro-register", "ErrImageNeverPull", "not present")],
        main=[waiting("runner", "PodInitializing")],
    )
    assert pod_problem(stuck) == "Pod ci-abc-x1: ErrImageNeverPull: not present"
    crashing = pod(init=[waiting("dind", "CrashLoopBackOff", "back-off 10s")])
    assert pod_problem(crashing) == "Pod ci-abc-x1: CrashLoopBackOff: back-off 10s"


def test_a_pod_that_is_still_initialising_has_no_problem():
    assert pod_problem(pod(main=[waiting("runner", "PodInitializing")])) is None
    assert pod_problem(pod(init=[waiting("dind", "ContainerCreating")])) is None


def test_a_container_that_exits_at_once_says_why_in_its_termination_message():
    # dind-userns's daemon on a node without /dev/net/tun: what the group's condition shows
    # is the daemon's own words, not the kubelet's back-off
    said = "dind-userns: no /dev/net/tun in the runner Pod: its RuntimeClass must provide it"
    status = waiting("dockerd", "CrashLoopBackOff", "back-off 20s restarting failed container")
    status["lastState"] = {"terminated": {"exitCode": 1, "message": said}}
    assert pod_problem(pod(init=[status])) == f"Pod ci-abc-x1: CrashLoopBackOff: {said}"


def test_a_sandbox_the_node_does_not_make_is_timed_from_when_it_began():
    from gitea_runner_operator.objects.views import sandbox_missing_since

    def with_conditions(*conditions: dict[str, str]) -> dict[str, Any]:
        return {"metadata": {"name": "p"}, "status": {"conditions": list(conditions)}}

    scheduled = {"type": "PodScheduled", "status": "True"}
    waiting_sandbox = {
        "type": "PodReadyToStartContainers",
        "status": "False",
        "lastTransitionTime": "2026-11-29T00:00:00Z",
    }
    since = sandbox_missing_since(with_conditions(scheduled, waiting_sandbox))
    assert since == 1795910400.0
    # not scheduled yet, or the sandbox made (image pulls come after): nothing to say
    assert sandbox_missing_since(with_conditions(waiting_sandbox)) is None
    made = {**waiting_sandbox, "status": "True"}
    assert sandbox_missing_since(with_conditions(scheduled, made)) is None
