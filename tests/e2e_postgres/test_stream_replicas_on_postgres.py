"""tests/e2e_redis/test_stream_replicas.py on PostgreSQL: a stream on A seen identically by a
subscriber on B, and a client that loses its stream on A resumes it on B with Last-Event-ID
(running and finished, both bindings), woken by LISTEN/NOTIFY instead of blocking reads."""

import pytest

from tests.e2e_redis.test_stream_replicas import *  # noqa: F403 (every test of it, collected here again)

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(90)]
