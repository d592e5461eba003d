"""The nemesis, short: three `a2a-server` replicas on a Redis of their own (AOF, appendfsync
always), each behind a cuttable proxy, a seeded schedule of faults (kill -9, a pause past the
lease, a cut healed early or late, Redis killed and restarted from its AOF) under clients that
retry and resume as documented, then the checker over the whole history (tests/nemesis/).

The same on PostgreSQL: test_nemesis_postgres.py. Any violation fails the test with the checker's
report. What "short" keeps: tests/nemesis/short_run.py. Longer runs: bench/nemesis.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.nemesis.short_run import short_run_breaks_no_guarantee


@pytest.mark.timeout(600)
def test_a_short_seeded_nemesis_run_breaks_no_guarantee(tmp_path: Path) -> None:
    short_run_breaks_no_guarantee(tmp_path, "redis")
