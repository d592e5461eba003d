"""tests/e2e_redis/test_crash_takeover.py, with the replicas on a Redis Cluster."""

from tests.e2e_redis.test_crash_takeover import *  # noqa: F403 (every test of it, collected here again)
