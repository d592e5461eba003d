"""Opening a file: the URL, the directory, the schema version, errors as StoreUnavailable."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from stores.errors import StoreError, StoreUnavailable
from stores.sqlite import database
from stores.sqlite.factory import create_sqlite_stores, sqlite_path
from stores.sqlite.schema import SCHEMA_VERSION
from tests.unit.test_store_contract import make_task

pytestmark = pytest.mark.sqlite


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:///a2a.db", "a2a.db"),
        ("sqlite:///data/a2a.db", "data/a2a.db"),
        ("sqlite:////var/lib/a2a/a2a.db", "/var/lib/a2a/a2a.db"),
    ],
)
def test_a_url_names_a_relative_or_an_absolute_file(url: str, path: str) -> None:
    assert sqlite_path(url) == path


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("sqlite:///", "names no file"),
        ("sqlite:////", "names no file"),
        ("sqlite:///:memory:", "in-memory"),
        ("sqlite://:memory:", "sqlite:///relative/path.db"),
        ("sqlite://host/a2a.db", "sqlite:///relative/path.db"),
        ("sqlite:a2a.db", "sqlite:///relative/path.db"),
        ("postgresql://localhost/a2a", "starts with sqlite:///"),
        ("sqlite:///a2a.db?mode=ro", "query parameters"),
        ("sqlite:///data/", "directory"),
    ],
)
def test_a_malformed_url_is_refused_in_one_line(url: str, says: str) -> None:
    with pytest.raises(ValueError) as refused:
        sqlite_path(url)
    message = str(refused.value)
    assert says in message and "\n" not in message


def test_a_missing_directory_is_an_error_naming_the_path(tmp_path: Path) -> None:
    path = str(tmp_path / "no-such-dir" / "a2a.db")
    with pytest.raises(ValueError, match="no-such-dir") as refused:
        create_sqlite_stores(path)
    assert path in str(refused.value)
    assert not (tmp_path / "no-such-dir").exists()


async def test_a_new_file_is_at_the_schema_version_in_wal_mode(db_path: str) -> None:
    stores = create_sqlite_stores(db_path)
    await stores.aclose()
    with sqlite3.connect(db_path) as raw:
        assert raw.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)


async def test_a_file_at_an_older_version_is_migrated_forward(db_path: str) -> None:
    await create_sqlite_stores(db_path).aclose()
    with sqlite3.connect(db_path) as raw:  # as a file from before the first migration
        tables = raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        for (name,) in tables:
            if name != "schema_version":
                raw.execute(f"DROP TABLE {name}")
        raw.execute("UPDATE schema_version SET version = 0")
    stores = create_sqlite_stores(db_path)
    try:
        task = make_task()
        await stores.tasks.create(task, owner="alice")
        assert (await stores.tasks.get(task.id, owner="alice")) is not None
    finally:
        await stores.aclose()
    with sqlite3.connect(db_path) as raw:
        assert raw.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]


async def test_a_file_of_a_newer_server_is_refused(db_path: str) -> None:
    await create_sqlite_stores(db_path).aclose()
    with sqlite3.connect(db_path) as raw:
        raw.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    with pytest.raises(StoreError, match="newer than this server"):
        create_sqlite_stores(db_path)
    await create_sqlite_stores(str(Path(db_path).with_name("other.db"))).aclose()  # lock freed?
    with sqlite3.connect(db_path) as raw:
        raw.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))
    await create_sqlite_stores(db_path).aclose()  # the refusal released the file's lock


def test_a_file_that_is_not_a_database_is_unavailable(db_path: str) -> None:
    Path(db_path).write_bytes(b"not a database, just bytes " * 100)
    with pytest.raises(StoreUnavailable, match="SQLite"):
        create_sqlite_stores(db_path)


async def test_a_file_locked_past_the_busy_timeout_is_unavailable_then_back(
    db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another program (the sqlite3 shell, a backup) holding the write lock: the write fails
    with StoreUnavailable after the busy timeout, never a sqlite3 error; then it goes on."""
    monkeypatch.setattr(database, "BUSY_TIMEOUT_S", 0.1)
    stores = create_sqlite_stores(db_path)
    try:
        other = sqlite3.connect(db_path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreUnavailable, match="locked"):
            await stores.tasks.create(make_task("t-1"), owner="alice")
        assert await stores.tasks.get("t-1", owner="alice") is None  # reads go on (WAL)
        other.execute("ROLLBACK")
        other.close()
        await stores.tasks.create(make_task("t-1"), owner="alice")
        assert await stores.tasks.get("t-1", owner="alice") is not None
    finally:
        await stores.aclose()


async def test_closed_stores_are_unavailable(db_path: str) -> None:
    stores = create_sqlite_stores(db_path)
    await stores.ping()
    await stores.aclose()
    with pytest.raises(StoreUnavailable):
        await stores.ping()
    with pytest.raises(StoreUnavailable):
        await stores.tasks.create(make_task(), owner="alice")
