"""The suite's short nemesis run (tests/e2e_chaos/test_nemesis*.py), one module per store so the
two land on different pytest workers. Long runs: bench/nemesis.py.

Shorter than bench's defaults in time, not in what it covers: a 3 s lease (a pause and a long
cut last the lease plus a little, so they are half as long) and 1.5-3 s between faults, so the
faults of a 40 s run at bench's pace fit in 24 s of clients (on an idle machine every kind
strikes; on a loaded one the last may not start in time, as before: the run asserts what the
40 s run asserted).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.nemesis.run import RunConfig, nemesis_run

SEED = 48


def short_run_breaks_no_guarantee(workdir: Path, database: str) -> None:
    """Run it; fail with the checker's report on any violation or if the run did not do what
    it claims (faults, the database's among them, every kind of turn, a joined stream)."""
    config = RunConfig(
        seed=SEED, seconds=24, sessions=4, database=database, lease_ttl_s=3.0,
        fault_gap_s=(1.5, 3.0),
    )  # fmt: skip
    result = nemesis_run(config, workdir)
    history = result.history
    if result.violations:
        pytest.fail(f"the nemesis found violations:\n{result.report}", pytrace=False)
    assert history.faults, result.report
    if database == "postgres":  # the database was among the faults
        assert "database" in {f.kind for f in history.faults}, result.report
    assert {"plain", "tool", "ask"} <= {t.kind for t in history.turns}, result.report
    assert any(s.joined and s.events for s in history.streams), result.report
