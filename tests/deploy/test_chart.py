"""The Helm chart, rendered by Helm's own engine (helm-python-sdk bundles Helm's Go SDK; no `helm`
binary, no cluster): what `helm install` would apply for a given set of values. Nothing here is
applied to a cluster: the manifests are checked, not run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import SecretStr

from app.settings import Settings

helm = pytest.importorskip("helm_python.chart")

CHART = Path(__file__).resolve().parents[2] / "helm" / "a2a-agent-server"
SECRET_SETTINGS = {
    name.upper()
    for name, field in Settings.model_fields.items()
    if field.annotation == SecretStr | None
}


def render(**values: Any) -> dict[str, dict[str, Any]]:
    """The manifests by kind (`Kind/name`) for these values."""
    manifests = helm.Chart.load(CHART).render(values=values, name="demo")
    docs: dict[str, dict[str, Any]] = {}
    for path, text in manifests.items():
        if path.endswith(".txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                docs[f"{doc['kind']}/{doc['metadata']['name']}"] = doc
    return docs


def config_of(docs: dict[str, dict[str, Any]]) -> dict[str, str]:
    return docs["ConfigMap/demo-a2a-agent-server"]["data"]


def server_container(docs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    (container,) = docs["Deployment/demo-a2a-agent-server"]["spec"]["template"]["spec"][
        "containers"
    ]
    return container


def test_defaults_render_one_replica_in_memory_and_lint_clean() -> None:
    docs = render()
    deployment = docs["Deployment/demo-a2a-agent-server"]
    assert deployment["spec"]["replicas"] == 1
    assert "REDIS_URL" not in config_of(docs)
    assert not any(
        kind.startswith(("HorizontalPodAutoscaler", "PodDisruptionBudget")) for kind in docs
    )
    assert config_of(docs)["A2A_HOST"] == "0.0.0.0"
    # The server refuses a pod address without authentication: the chart always provides keys.
    env_from = [ref.get("secretRef", {}).get("name") for ref in server_container(docs)["envFrom"]]
    assert "demo-a2a-agent-server-auth" in env_from
    assert "A2A_API_KEYS" in docs["Secret/demo-a2a-agent-server-auth"]["stringData"]
    assert helm.lint(str(CHART))["errors"] == []


@pytest.mark.parametrize(
    "values",
    [
        {"replicaCount": 2},
        {"autoscaling": {"enabled": True}},
        {"replicaCount": 3, "config": {"REDIS_URL": ""}},
    ],
)
def test_several_replicas_without_redis_are_refused(values: dict[str, Any]) -> None:
    with pytest.raises(Exception, match="More than one replica needs a shared Redis"):
        render(**values)


def test_two_replicas_with_the_bundled_redis_share_it() -> None:
    docs = render(replicaCount=2, redis={"enabled": True})
    assert docs["Deployment/demo-a2a-agent-server"]["spec"]["replicas"] == 2
    assert config_of(docs)["REDIS_URL"] == "redis://demo-a2a-agent-server-redis:6379/0"
    redis_service = docs["Service/demo-a2a-agent-server-redis"]
    redis_pod = docs["Deployment/demo-a2a-agent-server-redis"]["spec"]["template"]["metadata"]
    assert redis_service["spec"]["selector"] == redis_pod["labels"]
    # The server's Service must not select the Redis pod (nor the other way round).
    server_selector = docs["Service/demo-a2a-agent-server"]["spec"]["selector"]
    assert not server_selector.items() <= redis_pod["labels"].items()
    assert docs["PodDisruptionBudget/demo-a2a-agent-server"]["spec"]["minAvailable"] == 1


@pytest.mark.parametrize(
    "values",
    [
        {"config": {"REDIS_URL": "redis://redis-master:6379/0"}},
        {"secretEnv": {"REDIS_URL": "redis://:pw@redis-master:6379/0"}},
        {"existingSecret": "mine", "redis": {"urlInSecret": True}},
    ],
)
def test_an_external_redis_allows_autoscaling(values: dict[str, Any]) -> None:
    docs = render(autoscaling={"enabled": True}, **values)
    assert docs["HorizontalPodAutoscaler/demo-a2a-agent-server"]["spec"]["minReplicas"] == 2
    assert "replicas" not in docs["Deployment/demo-a2a-agent-server"]["spec"]
    assert not any(kind.endswith("-redis") for kind in docs)


def test_secrets_go_to_a_secret_never_to_the_config_map() -> None:
    docs = render(secretEnv={"LLM_API_KEY": "sk-secret"})
    assert docs["Secret/demo-a2a-agent-server"]["stringData"] == {"LLM_API_KEY": "sk-secret"}
    assert "sk-secret" not in yaml.safe_dump(config_of(docs))
    for name in SECRET_SETTINGS:
        with pytest.raises(Exception, match="schema"):
            render(config={name: "x"})


def test_the_schema_refuses_unknown_and_mistyped_values() -> None:
    for values in (
        {"replicas": 2},  # a misspelt key is an error, not silently ignored
        {"replicaCount": "2"},
        {"ingress": {"enabled": "yes"}},
        {"config": {"agent_name": "lower-case is not a setting name"}},
        {"publicUrl": "agent.example.com"},  # no scheme
    ):
        with pytest.raises(Exception, match="schema"):
            render(**values)


def test_every_setting_can_be_set_through_values() -> None:
    plain = {name.upper() for name in Settings.model_fields} - SECRET_SETTINGS
    config = dict.fromkeys(plain - {"A2A_SHUTDOWN_GRACE_S"}, "x")
    data = config_of(render(config=config))
    assert {name: data.get(name) for name in config} == config
    assert SECRET_SETTINGS == {"LLM_API_KEY", "A2A_API_KEYS"}  # both reachable: secretEnv, auth


def test_the_grace_period_covers_the_pre_stop_pause_and_the_drain() -> None:
    container = server_container(docs := render())
    pod = docs["Deployment/demo-a2a-agent-server"]["spec"]["template"]["spec"]
    assert container["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "5"]
    assert pod["terminationGracePeriodSeconds"] > 5 + float(config_of(docs)["A2A_SHUTDOWN_GRACE_S"])
    with pytest.raises(Exception, match="terminationGracePeriodSeconds"):
        render(config={"A2A_SHUTDOWN_GRACE_S": "40"})
    assert render(config={"A2A_SHUTDOWN_GRACE_S": "40"}, terminationGracePeriodSeconds=50)


def test_public_url_and_ingress_reach_the_card_and_the_host_allow_list() -> None:
    docs = render(
        publicUrl="https://agent.example.com",
        ingress={
            "enabled": True,
            "className": "nginx",
            "host": "agent.example.com",
            "annotations": {"nginx.ingress.kubernetes.io/proxy-buffering": "off"},
            "tls": [{"secretName": "agent-tls", "hosts": ["agent.example.com"]}],
        },
    )
    config = config_of(docs)
    assert config["A2A_PUBLIC_URL"] == "https://agent.example.com"
    allowed = config["A2A_ALLOWED_HOSTS"].split(",")
    assert "agent.example.com" in allowed and "demo-a2a-agent-server.default.svc" in allowed
    assert allowed.count("agent.example.com") == 1
    ingress = docs["Ingress/demo-a2a-agent-server"]
    assert ingress["spec"]["ingressClassName"] == "nginx"
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] == "agent.example.com"
    backend = rule["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": "demo-a2a-agent-server", "port": {"name": "http"}}


def test_a_grpc_port_gets_a_container_port_and_a_service_port() -> None:
    docs = render()
    assert [port["name"] for port in server_container(docs)["ports"]] == ["http"]
    assert "A2A_GRPC_PORT" not in config_of(docs)
    docs = render(config={"A2A_GRPC_PORT": "50051"})
    ports = {port["name"]: port for port in server_container(docs)["ports"]}
    assert ports["grpc"]["containerPort"] == 50051
    service_ports = {
        port["name"]: port for port in docs["Service/demo-a2a-agent-server"]["spec"]["ports"]
    }
    assert service_ports["grpc"] == {
        "name": "grpc",
        "port": 50051,
        "targetPort": "grpc",
        "appProtocol": "grpc",
    }
    assert config_of(docs)["A2A_GRPC_PORT"] == "50051"
