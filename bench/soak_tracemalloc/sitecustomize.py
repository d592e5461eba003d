"""Run first by the `a2a-server` of `bench/memory_soak.py --tracemalloc DIR` (this folder leads its
PYTHONPATH): the server traces its allocations, and each SIGUSR1 writes a snapshot to
$SOAK_TRACEMALLOC_DIR/snapshot-NN.pickle (the bench diffs them: where the memory went)."""

from __future__ import annotations

import itertools
import os
import signal
import tracemalloc
from pathlib import Path
from types import FrameType

_FOLDER = Path(os.environ["SOAK_TRACEMALLOC_DIR"])
_NUMBERS = itertools.count()

tracemalloc.start(int(os.environ.get("SOAK_TRACEMALLOC_FRAMES", "1")))


def _write_snapshot(signum: int, frame: FrameType | None) -> None:
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__)]
    )
    snapshot.dump(str(_FOLDER / f"snapshot-{next(_NUMBERS):02d}.pickle"))


signal.signal(signal.SIGUSR1, _write_snapshot)
