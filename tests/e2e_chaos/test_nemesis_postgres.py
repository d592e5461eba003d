"""The nemesis, short, on PostgreSQL: three `a2a-server` replicas on one private PostgreSQL
(fsync and synchronous_commit on), each through its own cuttable proxy, the database killed -9
and restarted from its WAL in place of Redis (test_nemesis.py), the same checker over the rows.

A module of its own so that it and the Redis run go to different pytest workers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.nemesis.short_run import short_run_breaks_no_guarantee


@pytest.mark.postgres
@pytest.mark.timeout(600)
def test_a_short_seeded_nemesis_run_breaks_no_guarantee(tmp_path: Path) -> None:
    short_run_breaks_no_guarantee(tmp_path, "postgres")
