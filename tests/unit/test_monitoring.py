"""The alert rules, the dashboard and the docs' metric table (docs/operations.md) name only
series the operator exports, and every copy of a shipped file (chart and kustomize) is the
same: a renamed metric must break this test, not a team's alerting."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from gitea_runner_operator.metrics import PREFIX, Metrics
from gitea_runner_operator.metrics.why import WhyMetrics
from tests.support import CHART, MONITORING, REPO_ROOT

REPO = REPO_ROOT
NAME = re.compile(rf"\b{PREFIX}[a-z0-9_]+\b")


def exported() -> dict[str, str]:
    """Exposed sample names -> family type, as a scrape shows them."""
    names: dict[str, str] = {}
    metrics = Metrics()
    WhyMetrics.of(metrics.registry)  # the reconciler adds these to the same registry
    for family in metrics.registry.collect():
        suffixes = {
            "counter": ["_total"],
            "histogram": ["_bucket", "_sum", "_count"],
        }.get(family.type, [""])
        for suffix in suffixes:
            names[family.name + suffix] = family.type
    return names


def documented_families() -> dict[str, str]:
    """Series name -> type from the metric table in docs/operations.md."""
    text = (REPO / "docs" / "operations.md").read_text()
    section = text.split("## Metrics", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z0-9_]+)` \| (gauge|counter|histogram) \|", section, re.M)
    return {PREFIX + name: kind for name, kind in rows}


def rule_exprs() -> list[str]:
    doc = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    return [rule["expr"] for group in doc["spec"]["groups"] for rule in group["rules"]]


def dashboard_exprs(path: Path) -> list[str]:
    dash = json.loads(path.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dash["templating"]["list"] if "definition" in v]
    return exprs


def test_the_alert_rules_use_only_exported_series():
    names = exported()
    exprs = rule_exprs()
    assert len(exprs) >= 4
    used = {n for e in exprs for n in NAME.findall(e)}
    assert used, "the rules name no series"
    assert used <= set(names), sorted(used - set(names))


def test_the_dashboard_uses_only_exported_series_and_shows_demand_latency_and_gitea():
    names = exported()
    exprs = dashboard_exprs(MONITORING / "grafana-dashboard.json")
    used = {n for e in exprs for n in NAME.findall(e)}
    assert used <= set(names), sorted(used - set(names))
    for wanted in ("queued_jobs", "runners", "job_startup_latency_seconds_bucket",
                   "gitea_requests_total"):  # fmt: skip
        assert PREFIX + wanted in used


def test_the_docs_document_every_series_with_its_type():
    families = {}
    metrics = Metrics()
    WhyMetrics.of(metrics.registry)  # the reconciler adds these to the same registry
    for family in metrics.registry.collect():
        name = family.name + ("_total" if family.type == "counter" else "")
        families[name] = family.type
    assert documented_families() == families


def test_the_alerts_cover_the_issues_a_platform_team_pages_on():
    doc = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    alerts = {r["alert"] for g in doc["spec"]["groups"] for r in g["rules"]}
    assert {
        "GiteaRunnerJobsQueuedWithoutRunners",
        "GiteaUnreachable",
        "GiteaRunnerJobsFailing",
        "GiteaRunnerOperatorReconcileErrors",
    } <= alerts
    for group in doc["spec"]["groups"]:
        for rule in group["rules"]:
            assert rule["labels"]["severity"] in ("warning", "critical")
            assert rule["annotations"]["summary"]


def test_the_chart_ships_the_same_alerts_dashboard_and_crd():
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    chart_alerts = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
    assert rule["spec"] == chart_alerts
    assert (CHART / "files" / "dashboard.json").read_text() == (
        MONITORING / "grafana-dashboard.json"
    ).read_text()
    assert (CHART / "crds" / "crd.yaml").read_text() == (
        REPO / "manifests" / "crd.yaml"
    ).read_text(), "charts/.../crds/crd.yaml must be a copy of manifests/crd.yaml"


def test_the_monitoring_kustomization_points_at_the_operator():
    kustomization = yaml.safe_load((MONITORING / "kustomization.yaml").read_text())
    for name in kustomization["resources"]:
        assert (MONITORING / name).is_file(), name
    (generated,) = kustomization["configMapGenerator"]
    assert generated["files"] == ["grafana-dashboard.json"]
    service = yaml.safe_load((MONITORING / "service.yaml").read_text())
    monitor = yaml.safe_load((MONITORING / "servicemonitor.yaml").read_text())
    deployment = yaml.safe_load((REPO / "manifests" / "deployment.yaml").read_text())
    pod = deployment["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (port,) = service["spec"]["ports"]
    container_ports = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
    assert container_ports[port["targetPort"]] == 8081
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["endpoints"][0]["port"] == port["name"]
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
