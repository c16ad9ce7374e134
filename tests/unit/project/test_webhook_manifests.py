from tests.support import manifests


def test_the_webhook_service_reaches_the_operators_webhook_port():
    (service,) = manifests.load("service.yaml")
    (deployment,) = manifests.load("deployment.yaml")
    port = service["spec"]["ports"][0]
    assert port["port"] == 8082
    pod = deployment["spec"]["template"]
    container_ports = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
    assert container_ports[port["targetPort"]] == 8082
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert "service.yaml" in (manifests.MANIFESTS / "kustomization.yaml").read_text()
