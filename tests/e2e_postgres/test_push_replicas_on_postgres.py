"""tests/e2e_redis/test_push_replicas.py on PostgreSQL: a webhook registered through B for a turn
on A gets every event after it; the config and the delivery cursor are rows beside the task."""

import pytest

from tests.e2e_redis.test_push_replicas import *  # noqa: F403 (every test of it, collected here again)

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(90)]
