"""The chart with the stores in a database of the operator's (DATABASE_URL from an existing
Secret): the server reads the URL from that Secret, no Redis is rendered, and several replicas
(or an autoscaler) are allowed, as with a Redis. Rendered by Helm's own engine (see
tests/deploy/test_chart.py); nothing is applied to a cluster."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.deploy.test_chart import (
    assert_lint_clean,
    bundled_redis,
    config_of,
    notes,
    render,
    server_container,
)

DATABASE = {"database": {"existingSecret": "agents-db"}}


def env_of(docs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in server_container(docs).get("env", [])}


def test_the_database_url_comes_from_the_secret_and_no_redis_is_rendered() -> None:
    docs = render(**DATABASE)
    env = env_of(docs)
    assert env["DATABASE_URL"] == {
        "name": "DATABASE_URL",
        "valueFrom": {"secretKeyRef": {"name": "agents-db", "key": "database-url"}},
    }
    assert "REDIS_URL" not in env and "REDIS_PASSWORD" not in env
    assert "DATABASE_URL" not in config_of(docs) and "REDIS_URL" not in config_of(docs)
    assert bundled_redis(docs) == []
    assert not any(kind.startswith(("StatefulSet", "NetworkPolicy")) for kind in docs)
    said = notes(**DATABASE)
    assert "kept by your database (DATABASE_URL, from the Secret agents-db)" in said
    assert "a2a-server migrate" in said and "LOST" not in said
    assert_lint_clean(**DATABASE)


def test_the_secrets_key_is_a_value() -> None:
    docs = render(database={"existingSecret": "agents-db", "existingSecretKey": "url"})
    assert env_of(docs)["DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "agents-db",
        "key": "url",
    }


def test_a_database_counts_as_shared_stores_two_replicas_by_default_and_any_count() -> None:
    docs = render(**DATABASE)
    assert docs["Deployment/demo-a2a-agent-server"]["spec"]["replicas"] == 2
    assert "PodDisruptionBudget/demo-a2a-agent-server" in docs
    assert (
        render(replicaCount=3, **DATABASE)["Deployment/demo-a2a-agent-server"]["spec"]["replicas"]
        == 3
    )
    scaled = render(autoscaling={"enabled": True}, **DATABASE)
    assert scaled["HorizontalPodAutoscaler/demo-a2a-agent-server"]["spec"]["minReplicas"] == 2
    assert bundled_redis(scaled) == []
    # with redis.enabled=false too: the database is what the replicas share
    assert render(replicaCount=2, redis={"enabled": False}, **DATABASE)


def test_a_database_url_in_secret_env_is_a_database_too() -> None:
    values = {"secretEnv": {"DATABASE_URL": "postgresql://app:pw@db:5432/agents"}}
    docs = render(**values)
    assert docs["Secret/demo-a2a-agent-server"]["stringData"]["DATABASE_URL"].endswith("/agents")
    assert "pw@" not in yaml.safe_dump(config_of(docs))
    assert bundled_redis(docs) == []
    assert "DATABASE_URL" not in env_of(docs)  # envFrom the chart's Secret
    assert docs["Deployment/demo-a2a-agent-server"]["spec"]["replicas"] == 2


@pytest.mark.parametrize(
    "redis",
    [
        {"config": {"REDIS_URL": "redis://redis-master:6379/0"}},
        {"secretEnv": {"REDIS_URL": "redis://:pw@redis-master:6379/0"}},
        {"existingSecret": "mine", "redis": {"urlInSecret": True}},
    ],
)
def test_a_database_and_a_redis_together_are_refused(redis: dict[str, Any]) -> None:
    with pytest.raises(Exception, match=r"either a Redis .* or a database"):
        render(**redis, **DATABASE)


def test_the_schema_keeps_the_url_out_of_config_and_takes_the_tuning() -> None:
    with pytest.raises(Exception, match="schema"):
        render(config={"DATABASE_URL": "postgresql://app:pw@db/agents"})
    with pytest.raises(Exception, match="schema"):
        render(database={"url": "postgresql://app:pw@db/agents"})
    with pytest.raises(Exception, match="schema"):
        render(database={"existingSecret": "agents-db", "existingSecretKey": ""})
    docs = render(
        config={"DATABASE_POOL_SIZE": "20", "DATABASE_COMMAND_TIMEOUT_S": "3"}, **DATABASE
    )
    assert config_of(docs)["DATABASE_POOL_SIZE"] == "20"
    assert config_of(docs)["DATABASE_COMMAND_TIMEOUT_S"] == "3"
