"""tests/e2e_redis/test_cancel_replicas.py, with the replicas on a Redis Cluster."""

from tests.e2e_redis.test_cancel_replicas import *  # noqa: F403 (every test of it, collected here again)
