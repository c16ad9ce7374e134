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
    [(["--workers", "0"], "--workers"), (["--job-ttl-seconds", "-1"], "--job-ttl-seconds")],
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
