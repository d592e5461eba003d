"""What a cluster REDIS_URL means, what the startup log says of it, and what is refused."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.services import describe_stores
from app.settings import Settings
from stores.redis.cluster import ClusterAddress, is_cluster_url
from stores.redis.factory import create_redis_stores


def test_seed_nodes_credentials_and_tls() -> None:
    address = ClusterAddress.parse("rediss+cluster://app:p%40ss@10.0.0.1:7000,10.0.0.2/0")
    assert address.nodes == [("10.0.0.1", 7000), ("10.0.0.2", 6379)]
    assert (address.username, address.password, address.tls) == ("app", "p@ss", True)
    plain = ClusterAddress.parse("redis://endpoint:6380")  # with REDIS_CLUSTER=true
    assert (plain.nodes, plain.tls, plain.password) == ([("endpoint", 6380)], False, None)
    assert is_cluster_url("redis+cluster://h:1") and not is_cluster_url("redis://h:1")


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis+cluster://h:7000/3", "only database 0"),
        ("redis+cluster://h:7000,,h2:7001", "names no host"),
    ],
)
def test_a_cluster_url_that_cannot_work_is_refused(url: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        create_redis_stores(url, max_running_turns=64, max_streams=1000)


def test_the_settings_take_cluster_schemes_and_refuse_others() -> None:
    assert Settings(redis_url="redis+cluster://h:7000").redis_url == "redis+cluster://h:7000"
    with pytest.raises(ValidationError, match="redis\\+cluster://"):
        Settings(redis_url="cluster://h:7000")


def test_the_startup_log_names_the_seeds_never_the_password() -> None:
    settings = Settings(redis_url="redis+cluster://app:secret@h1:7000,h2:7001")
    line = describe_stores(settings)
    assert line == "stores=<redis-cluster>, url=<redis+cluster://h1:7000,h2:7001>"
    assert "secret" not in describe_stores(
        Settings(redis_url="redis://app:secret@h1:7000", redis_cluster=True)
    )
