import pytest

from gitea_runner_operator.cli import build_parser, main, settings_from_args


def test_defaults_match_the_documented_ones():
    settings = settings_from_args(build_parser().parse_args([]))
    assert settings.namespaces == ()
    assert settings.leader_elect is True
    assert settings.health_port == 8081
    assert settings.workers == 32
    assert settings.job_ttl_seconds == 600


def test_namespaces_repeat_and_deduplicate():
    args = build_parser().parse_args(["--namespace", "a", "--namespace", "b", "--namespace", "a"])
    assert settings_from_args(args).namespaces == ("a", "b")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--workers", "0"], "--workers"),
        (["--job-ttl-seconds", "-1"], "--job-ttl-seconds"),
        (["--kube-writes-per-namespace", "0"], "--kube-writes-per-namespace"),
        (["--gitea-requests-per-namespace", "0"], "--gitea-requests-per-namespace"),
        (["--tenant-read-rate", "0"], "--tenant-read-rate"),
    ],
)
def test_bad_flags_are_refused_by_name(argv, message):
    with pytest.raises(SystemExit, match=message):
        settings_from_args(build_parser().parse_args(argv))


def test_unusable_kubeconfig_is_a_clear_error(tmp_path, monkeypatch, capsys):
    empty = tmp_path / "kubeconfig"
    empty.write_text("")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code = main(["--kubeconfig", str(empty), "--no-leader-elect", "--log-format", "json"])
    assert code == 2
    err = capsys.readouterr().err
    assert "cannot load Kubernetes credentials" in err
    assert str(empty) in err


def test_an_open_door_is_said_at_start():
    from gitea_runner_operator.manager import startup_warnings
    from gitea_runner_operator.settings import Settings

    (warning,) = startup_warnings(Settings())
    assert "--allowed-gitea-url is not set" in warning and "gitea.bpg.pw/gitea-url" in warning
    pinned = Settings(allowed_gitea_urls=("https://gitea.example.com/",))
    assert startup_warnings(pinned) == []
    (loose,) = startup_warnings(
        Settings(allowed_gitea_urls=("https://g/",), template_policy="hostPath")
    )
    assert "--template-policy hostPath" in loose


def test_a_sharding_replica_offers_its_pod_ip_and_webhook_port_to_its_peers(monkeypatch):
    from gitea_runner_operator.manager import webhook_address
    from gitea_runner_operator.settings import Settings

    monkeypatch.setenv("POD_IP", "10.244.1.7")
    assert webhook_address(Settings(sharding=True, webhook_port=9000)) == "10.244.1.7:9000"
    assert webhook_address(Settings(sharding=False)) is None  # nobody forwards: offer nothing
    assert webhook_address(Settings(sharding=True, webhook_port=0)) is None  # webhooks off
    monkeypatch.delenv("POD_IP")
    assert webhook_address(Settings(sharding=True)) is None  # an old chart: no POD_IP


def test_a_platform_with_many_groups_in_one_namespace_can_widen_its_share():
    """The per-namespace places (kit/fair_gate.py) reach the Gitea fetcher and the write
    limiter: one namespace alone polls at most that many requests at a time."""
    from unittest.mock import MagicMock

    from gitea_runner_operator.kube.ratelimit import TokenBucket
    from gitea_runner_operator.poll.observer import Observer

    args = ["--gitea-requests-per-namespace", "32", "--kube-writes-per-namespace", "64"]
    settings = settings_from_args(build_parser().parse_args(args))
    observer = Observer(
        MagicMock(), MagicMock(), requests_per_namespace=settings.gitea_requests_per_namespace
    )
    assert observer._fetcher.turns.per_key == 32
    writes = TokenBucket(1, 1, per_namespace=settings.kube_writes_per_namespace)
    assert writes.in_flight.per_key == 64
    defaults = settings_from_args(build_parser().parse_args([]))
    assert (defaults.gitea_requests_per_namespace, defaults.kube_writes_per_namespace) == (4, 8)


def test_the_tenant_read_rate_is_given_in_kib_a_second():
    settings = settings_from_args(build_parser().parse_args(["--tenant-read-rate", "512"]))
    assert settings.tenant_read_rate == 512 * 1024
    assert settings_from_args(build_parser().parse_args([])).tenant_read_rate == 4096 * 1024
