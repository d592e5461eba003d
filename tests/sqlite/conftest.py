"""The SQLite backend's own tests: a file per test in pytest's tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    return str(tmp_path / "a2a.db")
