"""Names shared by the CRD, the controller and the objects it creates."""

from typing import Final

GROUP: Final = "gitea.bpg.pw"
VERSION: Final = "v1alpha1"
KIND: Final = "RunnerGroup"
PLURAL: Final = "runnergroups"
API_VERSION: Final = f"{GROUP}/{VERSION}"

MANAGED_BY_LABEL: Final = f"{GROUP}/managed-by"
MANAGED_BY_VALUE: Final = "gitea-runner-operator"
GROUP_NAME_LABEL: Final = f"{GROUP}/runnergroup-name"
# The shard bucket of the group's capacity domain (api/shard.py), on runner Jobs and their
# Pods: under --sharding each replica's Job and Pod watches select the buckets it holds.
SHARD_LABEL: Final = f"{GROUP}/shard"
APP_LABEL: Final = "app"

# Set on a runner Job once Gitea has been seen running a task on it. It lives in the cluster,
# so a restarted operator never mistakes a runner that has worked for an idle one.
TOOK_JOB_ANNOTATION: Final = f"{GROUP}/took-job"
# The labels the Job's runner registered with; lets a reader see what the Pod offers.
RUNNER_LABELS_ANNOTATION: Final = f"{GROUP}/runner-labels"

# Released, immutable tags: a mutable tag (":nightly", ":latest") would change the runner
# under a running installation. The runner's release (tested by the e2e suite, which builds
# this version from source) and the Docker its own "-dind" image is built on.
RUNNER_VERSION: Final = "1.0.8"
DEFAULT_IMAGE: Final = f"gitea/runner:{RUNNER_VERSION}-dind-rootless"
# The plain runner image: no Docker daemon inside (used by the dind and host modes).
PLAIN_IMAGE: Final = f"gitea/runner:{RUNNER_VERSION}"
DIND_IMAGE: Final = "docker:29.5.2-dind"
# dind-userns's daemon sidecar: the same Docker, with rootlesskit and slirp4netns.
USERNS_DAEMON_IMAGE: Final = "docker:29.5.2-dind-rootless"
# The RuntimeClass a dind-userns runner Pod names unless its template names another: it must
# run the Pod with /dev/net/tun (docs/runners.md, dind-userns). The chart can create it.
USERNS_RUNTIME_CLASS: Final = "gitea-runner-userns"
DEFAULT_POLL_INTERVAL: Final = "15s"
DEFAULT_IDLE_TIMEOUT: Final = "10m"
# Long enough for a node autoscaler to add a node and pull a DinD image.
DEFAULT_STARTUP_TIMEOUT: Final = "10m"
DEFAULT_DRAIN_TIMEOUT: Final = "5m"
DEFAULT_WARM_MAX_AGE: Final = "1h"
# A busy runner that is asked to stop (node drain) gets this long to finish its job.
DEFAULT_TERMINATION_GRACE_PERIOD: Final = "1h"
MIN_POLL_INTERVAL_SECONDS: Final = 5.0
MAX_POLL_INTERVAL_SECONDS: Final = 600.0
# spec.webhook.pollInterval: the safety-net poll while deliveries arrive (api/cadence.py).
DEFAULT_WEBHOOK_POLL_INTERVAL: Final = "5m"
MAX_WEBHOOK_POLL_INTERVAL_SECONDS: Final = 3600.0
MIN_IDLE_TIMEOUT_SECONDS: Final = 60.0
MAX_IDLE_TIMEOUT_SECONDS: Final = 86400.0
MIN_STARTUP_TIMEOUT_SECONDS: Final = 60.0
MAX_STARTUP_TIMEOUT_SECONDS: Final = 86400.0
MIN_RUNNER_LIFETIME_SECONDS: Final = 60.0
MAX_RUNNER_LIFETIME_SECONDS: Final = 7 * 86400.0

MANAGED_SELECTOR: Final = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"
