"""The chart's guards around the bundled Redis and the card-signing key, rendered by Helm's engine
(as tests/deploy/test_chart.py): a password from a Secret (generated and kept, or given) that the
server's REDIS_URL and Redis's probes read, `maxmemory` with `noeviction`, a NetworkPolicy that
admits the server's pods only, and a signing key mounted from a Secret. The rendered Redis
arguments and probe command are run against a private redis-server."""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any

import pytest
import redis

from tests.deploy.test_chart import (
    CHART,
    ChartRedis,
    assert_lint_clean,
    config_of,
    render,
    server_container,
)

REDIS = "StatefulSet/demo-a2a-agent-server-redis"
SECRET = "Secret/demo-a2a-agent-server-redis"
POLICY = "NetworkPolicy/demo-a2a-agent-server-redis"
URL = "redis://:$(REDIS_PASSWORD)@demo-a2a-agent-server-redis:6379/0"


def redis_container(docs: dict[str, Any]) -> dict[str, Any]:
    (container,) = docs[REDIS]["spec"]["template"]["spec"]["containers"]
    return container


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {entry["name"]: entry for entry in container.get("env", [])}


def secret_ref(entry: dict[str, Any]) -> tuple[str, str]:
    ref = entry["valueFrom"]["secretKeyRef"]
    return ref["name"], ref["key"]


def test_by_default_redis_has_a_generated_password_the_server_reads_from_its_secret() -> None:
    docs = render()
    password = docs[SECRET]["stringData"]["redis-password"]
    assert re.fullmatch(r"[A-Za-z0-9]{40}", password)
    redis_env, server_env = env_of(redis_container(docs)), env_of(server_container(docs))
    wanted = ("demo-a2a-agent-server-redis", "redis-password")
    assert secret_ref(redis_env["REDIS_PASSWORD"]) == wanted
    assert secret_ref(server_env["REDIS_PASSWORD"]) == wanted
    assert server_env["REDIS_URL"]["value"] == URL  # Kubernetes expands it from the Secret
    args = redis_container(docs)["args"]
    assert args[args.index("--requirepass") + 1] == "$(REDIS_PASSWORD)"
    # The password is in that Secret only: no ConfigMap, no other manifest carries it.
    elsewhere = [name for name, doc in docs.items() if name != SECRET and password in str(doc)]
    assert elsewhere == []
    assert "REDIS_URL" not in config_of(docs)
    # Kept on upgrades: the Secret already installed is looked up and its password reused.
    template = (CHART / "templates" / "redis-secret.yaml").read_text()
    assert 'lookup "v1" "Secret" .Release.Namespace $name' in template
    assert "index $existing.data $key | b64dec" in template


def test_an_existing_secret_gives_the_password_and_none_is_generated() -> None:
    values = {"auth": {"existingSecret": "my-redis", "existingSecretPasswordKey": "pw"}}
    docs = render(redis=values)
    assert SECRET not in docs
    assert secret_ref(env_of(redis_container(docs))["REDIS_PASSWORD"]) == ("my-redis", "pw")
    server_env = env_of(server_container(docs))
    assert secret_ref(server_env["REDIS_PASSWORD"]) == ("my-redis", "pw")
    assert server_env["REDIS_URL"]["value"] == URL
    assert_lint_clean(redis=values)


def test_an_external_redis_has_none_of_the_bundled_ones_guards() -> None:
    docs = render(config={"REDIS_URL": "redis://my-redis:6379/0"})
    assert not {SECRET, POLICY, REDIS} & set(docs)
    assert "env" not in server_container(docs)  # REDIS_URL from the ConfigMap, as given
    assert config_of(docs)["REDIS_URL"] == "redis://my-redis:6379/0"


def test_redis_is_bounded_and_never_evicts() -> None:
    args = redis_container(render())["args"]
    assert args[args.index("--maxmemory") + 1] == "768mb"
    assert args[args.index("--maxmemory-policy") + 1] == "noeviction"
    args = redis_container(render(redis={"maxmemory": "2gb"}))["args"]
    assert args[args.index("--maxmemory") + 1] == "2gb"
    assert_lint_clean(redis={"maxmemory": "2gb"})
    with pytest.raises(Exception, match="schema"):
        render(redis={"maxmemory": "lots"})


def test_both_probes_authenticate() -> None:
    container = redis_container(render())
    probe = ["sh", "-c", "redis-cli ping | grep -q PONG"]
    assert container["readinessProbe"]["exec"]["command"] == probe
    assert container["livenessProbe"]["exec"]["command"] == probe
    assert env_of(container)["REDISCLI_AUTH"]["value"] == "$(REDIS_PASSWORD)"


def test_the_rendered_redis_refuses_strangers_passes_its_probe_and_refuses_writes_when_full() -> (
    None
):
    """The rendered arguments on a private redis-server (maxmemory made small to fill it)."""
    container = redis_container(render(redis={"maxmemory": "2mb"}))
    with ChartRedis(container["args"], password="chart-guard-pw") as server:
        stranger = redis.Redis(host="127.0.0.1", port=server.port)
        with pytest.raises(redis.AuthenticationError):
            stranger.ping()
        client = server.client()
        assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
        assert client.config_get("maxmemory") == {"maxmemory": str(2 * 1024 * 1024)}

        def probe(password: str) -> int:
            # The probe's command as the pod runs it, pointed at this server's port.
            command = container["readinessProbe"]["exec"]["command"][2].replace(
                "redis-cli", f"redis-cli -p {server.port}"
            )
            env = {**os.environ, "REDISCLI_AUTH": password}
            return subprocess.run(["sh", "-c", command], env=env, timeout=10).returncode

        assert probe("chart-guard-pw") == 0
        assert probe("wrong") != 0
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            for n in range(10_000):
                client.set(f"chart-guard:{n}", "x" * 1024)
        assert client.get("chart-guard:0") == "x" * 1024  # nothing written was evicted


def test_a_network_policy_admits_the_servers_pods_only() -> None:
    docs = render()
    policy = docs[POLICY]["spec"]
    redis_labels = docs[REDIS]["spec"]["template"]["metadata"]["labels"]
    server_labels = docs["Deployment/demo-a2a-agent-server"]["spec"]["template"]["metadata"][
        "labels"
    ]
    assert policy["podSelector"] == {"matchLabels": redis_labels}
    assert policy["policyTypes"] == ["Ingress"]
    assert policy["ingress"] == [
        {
            "from": [{"podSelector": {"matchLabels": server_labels}}],
            "ports": [{"protocol": "TCP", "port": 6379}],
        }
    ]
    assert not redis_labels.items() <= server_labels.items()
    off = {"networkPolicy": {"enabled": False}}
    assert POLICY not in render(redis=off)
    assert_lint_clean(redis=off)
    assert_lint_clean()


def test_the_card_signing_key_is_mounted_from_a_secret() -> None:
    docs = render()
    assert "A2A_CARD_SIGNING_KEY" not in config_of(docs)
    assert all(m["name"] != "card-signing" for m in server_container(docs)["volumeMounts"])
    values = {"existingSecret": "card-key", "key": "signing.pem"}
    docs = render(cardSigning=values)
    assert config_of(docs)["A2A_CARD_SIGNING_KEY"] == "/etc/a2a-card-signing/signing.pem"
    mounts = {m["name"]: m for m in server_container(docs)["volumeMounts"]}
    assert mounts["card-signing"] == {
        "name": "card-signing",
        "mountPath": "/etc/a2a-card-signing",
        "readOnly": True,
    }
    pod = docs["Deployment/demo-a2a-agent-server"]["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "card-signing"]
    assert volume["secret"] == {
        "secretName": "card-key",
        "items": [{"key": "signing.pem", "path": "signing.pem"}],
        "defaultMode": 0o440,
    }
    assert pod["securityContext"]["fsGroup"] == 10001  # the server's group reads it
    assert_lint_clean(cardSigning=values)
    with pytest.raises(Exception, match="schema"):
        render(cardSigning={"existingSecret": "k", "key": "../etc/passwd"})
