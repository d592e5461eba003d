"""The Helm chart, rendered by Helm's own engine (helm-python-sdk bundles Helm's Go SDK; no `helm`
binary, no cluster): what `helm install` would apply for a given set of values. Nothing here is
applied to a cluster: the manifests are checked, not run; only the bundled Redis's arguments are
run, by a private redis-server (tests.e2e_redis.support), to see its data outlive a SIGKILL."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from pydantic import SecretStr

from app.settings import Settings
from app.settings.agents_file import load_agents_file
from tests.e2e_redis.support import RedisServer

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


def notes(**values: Any) -> str:
    """What `helm install` prints (NOTES.txt) for these values."""
    manifests = helm.Chart.load(CHART).render(values=values, name="demo")
    return manifests["a2a-agent-server/templates/NOTES.txt"]


def assert_lint_clean(**values: Any) -> None:
    """`helm lint --strict` with these values: no error, no warning (info such as a missing icon
    is allowed)."""
    report = helm.lint(str(CHART), values=values, strict=True)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def bundled_redis(docs: dict[str, dict[str, Any]]) -> list[str]:
    return [kind for kind in docs if kind.split("/")[1].startswith("demo-a2a-agent-server-redis")]


def test_defaults_lose_no_task_when_a_pod_goes() -> None:
    docs = render()
    deployment = docs["Deployment/demo-a2a-agent-server"]
    pod = deployment["spec"]["template"]["spec"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    # Two replicas on a shared Redis: a rollout, a drain or a crash leaves one serving...
    assert deployment["spec"]["replicas"] >= 2
    assert docs["PodDisruptionBudget/demo-a2a-agent-server"]["spec"] == {
        "minAvailable": 1,
        "selector": {"matchLabels": selector},
    }
    # ... a rollout starts a new pod before it stops an old one ...
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    # ... and the replicas are spread over nodes where the cluster allows it.
    (spread,) = pod["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert spread["podAffinityTerm"] == {
        "topologyKey": "kubernetes.io/hostname",
        "labelSelector": {"matchLabels": selector},
    }
    container = server_container(docs)
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert config_of(docs)["A2A_HOST"] == "0.0.0.0"
    # The server refuses a pod address without authentication: the chart always provides keys.
    env_from = [ref.get("secretRef", {}).get("name") for ref in container["envFrom"]]
    assert "demo-a2a-agent-server-auth" in env_from
    assert "A2A_API_KEYS" in docs["Secret/demo-a2a-agent-server-auth"]["stringData"]
    assert "LOST" not in notes()
    assert_lint_clean()


def test_the_bundled_redis_keeps_its_data_on_a_volume_and_the_server_uses_it() -> None:
    docs = render()
    redis = docs["StatefulSet/demo-a2a-agent-server-redis"]
    redis_pod = redis["spec"]["template"]
    (redis_container,) = redis_pod["spec"]["containers"]
    (claim,) = redis["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "8Gi"
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert "storageClassName" not in claim["spec"]  # the cluster's default class
    assert {"name": claim["metadata"]["name"], "mountPath": "/data"} in redis_container[
        "volumeMounts"
    ]
    assert "volumes" not in redis_pod["spec"]  # no emptyDir shadowing the claim
    args = " ".join(map(repr, redis_container["args"]))
    assert "'--dir' '/data'" in args
    assert "'--appendonly' 'yes'" in args
    assert "'--appendfsync' 'everysec'" in args
    # REDIS_URL names a Service that selects that pod (and only it), on Redis's port, with the
    # password of the Redis's Secret (never in the ConfigMap).
    assert "REDIS_URL" not in config_of(docs)
    env = {entry["name"]: entry for entry in server_container(docs)["env"]}
    assert (
        env["REDIS_URL"]["value"] == "redis://:$(REDIS_PASSWORD)@demo-a2a-agent-server-redis:6379/0"
    )
    service = docs["Service/demo-a2a-agent-server-redis"]["spec"]
    assert service["selector"] == redis_pod["metadata"]["labels"]
    assert service["ports"] == [{"name": "redis", "port": 6379, "targetPort": "redis"}]
    headless = docs[f"Service/{redis['spec']['serviceName']}"]["spec"]
    assert headless["clusterIP"] == "None"
    # The server's Service must not select the Redis pod (nor the other way round).
    server_selector = docs["Service/demo-a2a-agent-server"]["spec"]["selector"]
    assert not server_selector.items() <= redis_pod["metadata"]["labels"].items()
    assert "data-demo-a2a-agent-server-redis-0" in notes()


def test_redis_durability_and_storage_are_values() -> None:
    values = {
        "appendfsync": "always",
        "persistence": {"size": "20Gi", "storageClass": "fast-ssd"},
    }
    docs = render(redis=values)
    redis = docs["StatefulSet/demo-a2a-agent-server-redis"]["spec"]
    (redis_container,) = redis["template"]["spec"]["containers"]
    assert "'--appendfsync' 'always'" in " ".join(map(repr, redis_container["args"]))
    (claim,) = redis["volumeClaimTemplates"]
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    assert claim["spec"]["resources"]["requests"]["storage"] == "20Gi"
    assert_lint_clean(redis=values)
    for wrong in ({"appendfsync": "no"}, {"persistence": {"size": "lots"}}):
        with pytest.raises(Exception, match="schema"):
            render(redis=wrong)


class ChartRedis(RedisServer):
    """A private redis-server run with the bundled Redis's rendered arguments (its /data a temp
    directory), on a free loopback port."""

    def __init__(self, args: list[str], password: str = "chart-test-password") -> None:
        super().__init__(persistent=True)
        # Kubernetes expands $(REDIS_PASSWORD) from the container's env (the Secret's password).
        substitutes = {"/data": str(self.dir), "$(REDIS_PASSWORD)": password}
        self.args = [substitutes.get(arg, arg) for arg in args]
        self.password = password
        self.url = f"redis://:{password}@127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, password=self.password, decode_responses=True)

    def command(self) -> list[str]:
        local = ["--port", str(self.port), "--bind", "127.0.0.1", "--logfile", str(self.log_path)]
        return [self.binary or "redis-server", *self.args, *local]


@pytest.mark.parametrize("appendfsync", ["everysec", "always"])
def test_the_bundled_redis_keeps_what_it_answered_when_its_process_is_killed(
    appendfsync: str,
) -> None:
    spec = render(redis={"appendfsync": appendfsync})["StatefulSet/demo-a2a-agent-server-redis"]
    (container,) = spec["spec"]["template"]["spec"]["containers"]
    with ChartRedis(container["args"]) as server:
        client = server.client()
        assert client.config_get("appendfsync") == {"appendfsync": appendfsync}
        for n in range(50):
            client.hset(f"chart-test:task:{n}", mapping={"state": "TASK_STATE_WORKING"})
        assert server.proc is not None
        server.proc.kill()  # SIGKILL, as an OOM kill or a lost pod: no shutdown, no last fsync
        server.proc.wait(timeout=10)
        server.start()
        client = server.client()
        assert client.dbsize() == 50
        assert client.hgetall("chart-test:task:49") == {"state": "TASK_STATE_WORKING"}


def test_in_memory_is_one_value_away_and_says_it_loses_everything() -> None:
    docs = render(redis={"enabled": False})
    assert docs["Deployment/demo-a2a-agent-server"]["spec"]["replicas"] == 1
    assert "REDIS_URL" not in config_of(docs)
    assert not any(
        kind.startswith(("HorizontalPodAutoscaler", "PodDisruptionBudget", "StatefulSet"))
        for kind in docs
    )
    assert bundled_redis(docs) == []
    assert "WARNING: in-memory stores" in notes(redis={"enabled": False})
    assert_lint_clean(redis={"enabled": False})


@pytest.mark.parametrize(
    "values",
    [
        {"replicaCount": 2, "redis": {"enabled": False}},
        {"autoscaling": {"enabled": True}, "redis": {"enabled": False}},
        {"replicaCount": 3, "redis": {"enabled": False}, "config": {"REDIS_URL": ""}},
    ],
)
def test_several_replicas_on_in_memory_stores_are_refused(values: dict[str, Any]) -> None:
    with pytest.raises(
        Exception, match="More than one replica needs a shared Redis: with in-memory stores"
    ):
        render(**values)


def test_the_bundled_redis_serves_an_autoscaler_and_any_replica_count() -> None:
    docs = render(replicaCount=3)
    assert docs["Deployment/demo-a2a-agent-server"]["spec"]["replicas"] == 3
    docs = render(autoscaling={"enabled": True})
    assert docs["HorizontalPodAutoscaler/demo-a2a-agent-server"]["spec"]["minReplicas"] == 2
    assert "replicas" not in docs["Deployment/demo-a2a-agent-server"]["spec"]
    assert "StatefulSet/demo-a2a-agent-server-redis" in docs
    assert "PodDisruptionBudget/demo-a2a-agent-server" in docs


EXTERNAL_REDIS = [
    {"config": {"REDIS_URL": "redis://redis-master:6379/0"}},
    {"secretEnv": {"REDIS_URL": "redis://:pw@redis-master:6379/0"}},
    {"existingSecret": "mine", "redis": {"urlInSecret": True}},
]


@pytest.mark.parametrize("values", EXTERNAL_REDIS)
def test_an_external_redis_replaces_the_bundled_one(values: dict[str, Any]) -> None:
    docs = render(**values)
    assert bundled_redis(docs) == []
    assert docs["Deployment/demo-a2a-agent-server"]["spec"]["replicas"] == 2
    assert "PodDisruptionBudget/demo-a2a-agent-server" in docs
    assert config_of(docs).get("REDIS_URL") == values.get("config", {}).get("REDIS_URL")
    assert "your Redis (REDIS_URL)" in notes(**values)
    assert_lint_clean(**values)


@pytest.mark.parametrize("values", EXTERNAL_REDIS)
def test_an_external_redis_allows_autoscaling(values: dict[str, Any]) -> None:
    docs = render(autoscaling={"enabled": True}, **values)
    assert docs["HorizontalPodAutoscaler/demo-a2a-agent-server"]["spec"]["minReplicas"] == 2
    assert "replicas" not in docs["Deployment/demo-a2a-agent-server"]["spec"]
    assert bundled_redis(docs) == []


def test_an_affinity_given_replaces_the_spread_over_nodes() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["agents"]}]}
                ]
            }
        }
    }
    docs = render(affinity=affinity)
    assert (
        docs["Deployment/demo-a2a-agent-server"]["spec"]["template"]["spec"]["affinity"] == affinity
    )


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
    # each reachable: secretEnv, auth, database.existingSecret (tests/deploy/test_chart_database.py)
    assert SECRET_SETTINGS == {"LLM_API_KEY", "A2A_API_KEYS", "DATABASE_URL"}


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


TWO_AGENTS = [
    {
        "name": "triage",
        "description": "Sorts requests and hands them on.",
        "system_prompt": "You sort requests: research or writing?",
        "model": "openai/gpt-4o-mini",
        "api_key": "${OPENAI_API_KEY}",
        "tools": ["my_tools:add", "my_tools:search"],
        "max_iterations": 4,
        "skills": [
            {
                "id": "triage",
                "name": "Triage",
                "description": "Sorts a request",
                "tags": ["routing"],
                "examples": ["Where does this go?"],
            }
        ],
    },
    {"name": "writer", "description": "Writes the answer: short, clear."},
]
AGENTS_DIR = "/etc/a2a-agent-server"


def test_without_agents_the_pod_has_no_agents_file() -> None:
    docs = render()
    assert "ConfigMap/demo-a2a-agent-server-agents" not in docs
    assert "AGENTS_FILE" not in config_of(docs)
    container = server_container(docs)
    assert [mount["mountPath"] for mount in container["volumeMounts"]] == ["/tmp"]
    pod = docs["Deployment/demo-a2a-agent-server"]["spec"]["template"]
    assert "checksum/agents" not in pod["metadata"]["annotations"]


def test_agents_become_the_file_the_pod_reads_as_agents_file() -> None:
    docs = render(agents=TWO_AGENTS, secretEnv={"OPENAI_API_KEY": "sk-secret"})
    data = docs["ConfigMap/demo-a2a-agent-server-agents"]["data"]
    assert list(data) == ["agents.yaml"]
    assert yaml.safe_load(data["agents.yaml"]) == {"agents": TWO_AGENTS}
    assert "sk-secret" not in data["agents.yaml"]  # the key stays in the Secret, by reference
    # The server's environment names the file where the ConfigMap is mounted (read-only) ...
    assert config_of(docs)["AGENTS_FILE"] == f"{AGENTS_DIR}/agents.yaml"
    container = server_container(docs)
    assert {"name": "agents", "mountPath": AGENTS_DIR, "readOnly": True} in container[
        "volumeMounts"
    ]
    volumes = docs["Deployment/demo-a2a-agent-server"]["spec"]["template"]["spec"]["volumes"]
    assert {"name": "agents", "configMap": {"name": "demo-a2a-agent-server-agents"}} in volumes
    # ... and the referenced key reaches it from the Secret.
    assert docs["Secret/demo-a2a-agent-server"]["stringData"] == {"OPENAI_API_KEY": "sk-secret"}
    said = notes(agents=TWO_AGENTS)
    assert "/triage/  Sorts requests and hands them on." in said
    assert "/writer/  Writes the answer: short, clear." in said
    assert "/triage/" not in notes()
    assert_lint_clean(agents=TWO_AGENTS)


def test_the_server_reads_the_rendered_file_as_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the pod reads at AGENTS_FILE, read by the server's own loader: the same agents, the
    key from the environment (the Secret) where the file references it."""
    data = render(agents=TWO_AGENTS)["ConfigMap/demo-a2a-agent-server-agents"]["data"]
    (tmp_path / "agents.yaml").write_text(data["agents.yaml"])
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-secret")
    triage, writer = load_agents_file(str(tmp_path / "agents.yaml"))
    assert (triage.name, writer.name) == ("triage", "writer")
    assert triage.skills == TWO_AGENTS[0]["skills"]
    assert triage.overrides["agent_system_prompt"] == TWO_AGENTS[0]["system_prompt"]
    assert triage.overrides["agent_max_iterations"] == 4
    assert triage.overrides["llm_api_key"].get_secret_value() == "sk-from-the-secret"
    assert writer.description == TWO_AGENTS[1]["description"] and writer.overrides == {}


def test_a_change_of_agents_rolls_the_pods() -> None:
    def checksums(agents: list[dict[str, Any]]) -> dict[str, str]:
        pod = render(agents=agents)["Deployment/demo-a2a-agent-server"]["spec"]["template"]
        return pod["metadata"]["annotations"]

    before = checksums(TWO_AGENTS)
    edited = [TWO_AGENTS[0], {**TWO_AGENTS[1], "system_prompt": "Be brief."}]
    after = checksums(edited)
    assert before["checksum/agents"] != after["checksum/agents"]
    assert before["checksum/config"] == after["checksum/config"]
    assert checksums(TWO_AGENTS) == before  # the same agents: no rollout


@pytest.mark.parametrize(
    "agents",
    [
        [{"description": "no name"}],
        [{"name": "Research Agent"}],  # not URL-safe
        [{"name": "a", "api_key": "sk-inline-secret"}],  # secrets by reference only
        [{"name": "a", "System_Prompt": "x"}],  # keys are lower-case setting names
        [{"name": "a", "max_iteration": 3}],  # a misspelt key is refused, not ignored
        [{"name": "a", "max_iterations": "many"}],  # each key has its setting's type
        [{"name": "a", "fallback_models": [{"model": "m", "api_key": "sk-inline"}]}],  # by ref
        [{"name": "a", "params": ["temperature", 0]}],  # model parameters are an object
        [{"name": "a", "skills": [{"id": "s"}]}],  # a skill needs a name and a description
        {"name": "a"},  # a list, as in the file
    ],
)
def test_the_schema_refuses_malformed_agents(agents: Any) -> None:
    with pytest.raises(Exception, match="schema"):
        render(agents=agents)


def test_the_chart_checks_agents_with_the_agents_files_schema() -> None:
    """`agents` is checked at install as the server checks the file (docs/agents.schema.json,
    made from the settings), plus one rule: `api_key` only by reference, since a ConfigMap is
    no place for a secret. `UPDATE_DOCS=1` rewrites the chart's copy."""
    schema_path = CHART / "values.schema.json"
    values_schema = json.loads(schema_path.read_text())
    file_schema = json.loads((CHART.parents[1] / "docs" / "agents.schema.json").read_text())
    expected = copy.deepcopy(file_schema["properties"]["agents"]["items"])
    expected["properties"]["api_key"] = {
        "type": "string",
        "pattern": r"^\$\{[A-Za-z_][A-Za-z0-9_]*\}$",
        "description": "A reference to an environment variable set from secretEnv or"
        " existingSecret (`${OPENAI_API_KEY}`), never the key: the agents file is a ConfigMap.",
    }
    # A fallback model's key likewise; and only in YAML's list form, where the rule can see it.
    fallbacks = expected["properties"]["fallback_models"]
    listed = copy.deepcopy(fallbacks["anyOf"][0])
    listed["items"]["properties"]["api_key"] = expected["properties"]["api_key"]
    expected["properties"]["fallback_models"] = {"description": fallbacks["description"], **listed}
    if os.environ.get("UPDATE_DOCS"):
        values_schema["properties"]["agents"]["items"] = expected
        schema_path.write_text(json.dumps(values_schema, indent=2) + "\n")
    assert values_schema["properties"]["agents"]["items"] == expected, (
        "values.schema.json's agents drifted from docs/agents.schema.json: run"
        " UPDATE_DOCS=1 pytest tests/deploy/test_chart.py -k agents_files_schema"
    )


def test_duplicate_agent_names_and_two_agents_files_are_refused() -> None:
    with pytest.raises(Exception, match='the name "writer" is given twice'):
        render(agents=[*TWO_AGENTS, {"name": "writer"}])
    with pytest.raises(Exception, match="not both"):
        render(agents=TWO_AGENTS, config={"AGENTS_FILE": "/mine/agents.yaml"})
    # A file of one's own, mounted some other way, passes through as any setting.
    docs = render(config={"AGENTS_FILE": "/mine/agents.yaml"})
    assert config_of(docs)["AGENTS_FILE"] == "/mine/agents.yaml"
    assert "ConfigMap/demo-a2a-agent-server-agents" not in docs


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
