"""The nemesis, short: three `a2a-server` replicas on a Redis of their own (AOF, appendfsync
always), each behind a cuttable proxy, a seeded schedule of faults (kill -9, a pause past the
lease, a cut healed early or late, Redis killed and restarted from its AOF) under clients that
retry and resume as documented, then the checker over the whole history (tests/nemesis/).

The same on PostgreSQL: the three replicas on one private PostgreSQL (fsync and synchronous_commit
on), each through its own cuttable proxy, the database killed -9 and restarted from its WAL in
place of Redis, the same checker over the rows.

Any violation fails the test with the checker's report. Longer runs: bench/nemesis.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.nemesis.run import RunConfig, nemesis_run

SEED = 48


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "database", ["redis", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_a_short_seeded_nemesis_run_breaks_no_guarantee(tmp_path: Path, database: str) -> None:
    config = RunConfig(seed=SEED, seconds=40, sessions=4, database=database)
    result = nemesis_run(config, tmp_path)
    history = result.history
    if result.violations:
        pytest.fail(f"the nemesis found violations:\n{result.report}", pytrace=False)
    # The run did what it claims: faults struck, turns of every kind ran and were checked.
    assert history.faults, result.report
    if database == "postgres":  # the database was among the faults
        assert "database" in {f.kind for f in history.faults}, result.report
    assert {"plain", "tool", "ask"} <= {t.kind for t in history.turns}, result.report
    assert any(s.joined and s.events for s in history.streams), result.report
