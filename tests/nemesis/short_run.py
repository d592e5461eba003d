"""The suite's short nemesis run (tests/e2e_chaos/test_nemesis*.py), one module per store so the
two land on different pytest workers. Long runs: bench/nemesis.py.

Shorter than bench's defaults in time, not in what it covers: a 3 s lease (a pause and a long
cut last the lease plus a little, so they are half as long) and 1.5-3 s between faults, so every
kind of fault strikes once (the nemesis draws each kind once before any again) within the 24 s
of clients, and the run asserts that it did.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.nemesis.faults import POSTGRES_FAULTS, SINGLE_FAULTS
from tests.nemesis.run import RunConfig, nemesis_run

SEED = 48
FAULTS = {"redis": SINGLE_FAULTS, "postgres": POSTGRES_FAULTS}


def short_run_breaks_no_guarantee(workdir: Path, database: str) -> None:
    """Run it; fail with the checker's report on any violation or if the run did not do what
    it claims (every fault, every kind of turn, a joined stream)."""
    config = RunConfig(
        seed=SEED, seconds=24, sessions=4, database=database, lease_ttl_s=3.0,
        fault_gap_s=(1.5, 3.0),
    )  # fmt: skip
    result = nemesis_run(config, workdir)
    history = result.history
    if result.violations:
        pytest.fail(f"the nemesis found violations:\n{result.report}", pytrace=False)
    assert set(FAULTS[database]) <= {f.kind for f in history.faults}, result.report
    assert {"plain", "tool", "ask"} <= {t.kind for t in history.turns}, result.report
    assert any(s.joined and s.events for s in history.streams), result.report
