"""The multi-replica Redis end-to-end tests again, on a real Redis Cluster (three masters with a
replica each, tests/redis_cluster.py): the same fixtures, with `redis_url` the cluster's."""

from __future__ import annotations

import pytest

from tests.e2e_redis.conftest import *  # noqa: F403 (the same fixtures, on the cluster)
from tests.redis_cluster import shared_cluster


@pytest.fixture(scope="module")
def redis_url():
    return shared_cluster().url


@pytest.fixture(scope="module")
def redis_cluster():
    return shared_cluster()
