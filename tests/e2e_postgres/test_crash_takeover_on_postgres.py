"""tests/e2e_redis/test_crash_takeover.py on PostgreSQL: kill -9 of the replica running a turn
(during a tool call, and while the final answer streams); B takes the turn over from its
checkpoint once the lease expires (a conditional update of the lease's row), and the
conversation holds each message once."""

import pytest

from tests.e2e_redis.test_crash_takeover import *  # noqa: F403 (every test of it, collected here again)

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]
