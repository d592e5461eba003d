"""tests/e2e_redis/test_cancel_replicas.py on PostgreSQL: CancelTask on B stops the model call or
the tool call running on A within a second (the request reaches A by LISTEN/NOTIFY), and leaves
no lease held."""

import pytest

from tests.e2e_redis.test_cancel_replicas import *  # noqa: F403 (every test of it, collected here again)

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(90)]
