"""DATABASE_URL from the environment to the stores: what is accepted and refused (exit 2, one
line, never the password), which factory gets which arguments, what the startup log says, and
that an unreachable database makes the replica unready and requests fail with the
store-unavailable error, as Redis does.

The SQL backends (stores.postgres, stores.sqlite) are stood in for by fakes of their factories:
this is the wiring's test, not theirs."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from app import cli
from app.main import create_app
from app.settings import Settings
from app.storage import build_stores, describe_stores
from stores.base import StoreUnavailable
from stores.errors import StoreLocked
from stores.memory import InMemoryStores

from .scripted_llm import ScriptedLLM

ROOT = Path(__file__).resolve().parents[2]


def fake_backend(monkeypatch: pytest.MonkeyPatch, module: str, **functions: Any) -> None:
    """`module`'s functions replaced for the test: on the real module once it is in the tree,
    else on a stand-in module (the backends are written beside this wiring)."""
    try:
        real = importlib.import_module(module)
    except ImportError:  # not in the tree (or one of another tree's, found by an editable install)
        package, _, _ = module.rpartition(".")
        monkeypatch.setitem(sys.modules, package, types.ModuleType(package))
        monkeypatch.setitem(sys.modules, module, types.ModuleType(module))
        real = sys.modules[module]
    for name, function in functions.items():
        monkeypatch.setattr(real, name, function, raising=False)


@pytest.mark.parametrize(
    ("url", "kind", "shown"),
    [
        ("postgresql://app:s3cret@db.internal:6432/agents", "postgresql",
         "url=<postgresql://db.internal:6432/agents>"),
        ("postgres://app:s3cret@db.internal/agents?sslmode=require&password=s3cret", "postgresql",
         "url=<postgresql://db.internal:5432/agents>"),
        ("postgresql://app:s3cret@[::1]:5433/agents", "postgresql",
         "url=<postgresql://[::1]:5433/agents>"),
        ("postgresql:///agents?host=/run/postgresql", "postgresql",
         "url=<postgresql:///agents?host=/run/postgresql>"),
        ("sqlite:////var/lib/a2a/stores.db", "sqlite", "path=</var/lib/a2a/stores.db>"),
        ("sqlite:///stores.db", "sqlite", f"path=<{os.path.abspath('stores.db')}>"),
    ],
)  # fmt: skip
def test_accepted_urls_and_what_the_startup_log_says_of_them(
    url: str, kind: str, shown: str
) -> None:
    settings = Settings(database_url=url)
    assert settings.database is not None and settings.database.kind == kind
    assert settings.database.url == url  # the factory gets it whole, credentials included
    assert describe_stores(settings) == f"stores=<{kind}>, {shown}"
    assert "s3cret" not in describe_stores(settings)
    assert "s3cret" not in repr(settings) and "s3cret" not in str(settings.model_dump())


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("mysql://app:s3cret@h/db", "must start with postgresql://, postgres:// or sqlite:///"),
        ("http://h/db", "must start with postgresql://"),
        ("postgresql://app:s3cret@/db", "names no host"),
        ("postgresql://app:s3cret@h", "names no database"),
        ("postgresql://app:s3cret@h/a/b", "names no database"),
        ("postgresql://app:s3cret@h:port/db", "port that is not a number"),
        ("sqlite://h/stores.db", "names a file and no host"),
        ("sqlite:///", "names no SQLite file"),
        ("sqlite:///dir/", "names no SQLite file"),
    ],
)
def test_malformed_urls_are_refused_without_repeating_them(url: str, says: str) -> None:
    with pytest.raises(ValidationError) as refused:
        Settings(database_url=url)
    (error,) = refused.value.errors()
    assert error["loc"] == ("database_url",)
    assert says in error["msg"]
    assert "s3cret" not in error["msg"] and "app:" not in error["msg"]


def test_redis_and_a_database_together_are_refused() -> None:
    with pytest.raises(ValidationError, match="REDIS_URL and DATABASE_URL are both set"):
        Settings(redis_url="redis://127.0.0.1:6379/0", database_url="sqlite:///x.db")


def test_without_a_database_nothing_changes() -> None:
    assert Settings().database is None
    assert isinstance(build_stores(Settings()), InMemoryStores)
    assert describe_stores(Settings()) == "stores=<memory>"


def test_postgresql_gets_every_store_with_the_settings_pool_and_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []
    made = InMemoryStores.create(ttl_s=60)

    def create_postgres_stores(url: str, **kwargs: Any) -> InMemoryStores:
        calls.append((url, kwargs))
        return made

    fake_backend(
        monkeypatch, "stores.postgres.factory", create_postgres_stores=create_postgres_stores
    )
    url = "postgresql://app:s3cret@127.0.0.1:5432/agents"
    settings = Settings(
        database_url=url,
        database_pool_size=7,
        database_command_timeout_s=0.5,
        task_ttl_s=3600,
    )
    assert build_stores(settings) is made
    assert calls == [(url, {"ttl_s": 3600, "pool_size": 7, "command_timeout_s": 0.5})]
    defaults = Settings(database_url=url)
    assert (defaults.database_pool_size, defaults.database_command_timeout_s) == (None, 2.0)
    # Unset, the pool is sized from the turns a replica runs at once (at most 20).
    calls.clear()
    build_stores(Settings(database_url=url, a2a_max_running_turns=3))
    build_stores(defaults)
    assert [kwargs["pool_size"] for _, kwargs in calls] == [7, 20]


def test_sqlite_gets_the_file_its_factory_reads_from_the_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []
    made = InMemoryStores.create(ttl_s=60)

    def create_sqlite_stores(path: str, **kwargs: Any) -> InMemoryStores:
        calls.append((path, kwargs))
        return made

    fake_backend(
        monkeypatch,
        "stores.sqlite.factory",
        create_sqlite_stores=create_sqlite_stores,
        sqlite_path=lambda url: url.removeprefix("sqlite:///"),
    )
    assert build_stores(Settings(database_url="sqlite:////data/a2a.db", task_ttl_s=60)) is made
    assert calls == [("/data/a2a.db", {"ttl_s": 60, "max_tasks": None})]


def locked(path: str, **_: Any) -> InMemoryStores:
    raise StoreLocked(f"{path} is held by another server (pid 4242); one server per SQLite file")


def refused(url: str) -> str:
    raise ValueError("no such mode 'x'")


@pytest.mark.parametrize(
    ("functions", "line"),
    [
        (
            {"create_sqlite_stores": locked, "sqlite_path": lambda url: "a2a.db"},
            "a2a-server: a2a.db is held by another server (pid 4242); one server per SQLite file",
        ),
        (
            {"create_sqlite_stores": locked, "sqlite_path": refused},
            "a2a-server: invalid configuration: database_url: no such mode 'x'",
        ),
    ],
)
def test_a_sqlite_file_that_cannot_be_opened_stops_the_server_with_one_line(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    functions: dict[str, Any],
    line: str,
) -> None:
    fake_backend(monkeypatch, "stores.sqlite.factory", **functions)
    monkeypatch.setenv("DATABASE_URL", "sqlite:///a2a.db")
    monkeypatch.setattr(cli, "serve", lambda app, settings: pytest.fail("served"))
    assert cli.main([]) == 2
    assert capsys.readouterr().err.splitlines() == [line]


class Unreachable:
    """The stores as an unreachable database leaves them: every call, and the ping, raise
    StoreUnavailable (what stores.postgres does once its command timeout has passed)."""

    def __init__(self) -> None:
        inner = InMemoryStores.create(ttl_s=60)
        self.tasks, self.messages = _failing(inner.tasks), _failing(inner.messages)
        self.checkpoints, self.leases = _failing(inner.checkpoints), _failing(inner.leases)
        self.pushes, self.rate_limiter = _failing(inner.pushes), inner.rate_limiter
        self.pings = 0

    async def ping(self) -> None:
        self.pings += 1
        raise StoreUnavailable("database unreachable")

    async def aclose(self) -> None:
        return None


def _failing(store: Any) -> Any:
    async def fail(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("database unreachable")

    class Failing(type(store)):  # type: ignore[misc]
        def __getattribute__(self, name: str) -> Any:
            if name.startswith("_"):
                return object.__getattribute__(self, name)
            return fail

    failing = object.__new__(Failing)
    failing.__dict__.update(store.__dict__)
    return failing


async def test_an_unreachable_database_makes_the_replica_unready_and_requests_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stores = Unreachable()
    fake_backend(
        monkeypatch, "stores.postgres.factory", create_postgres_stores=lambda *a, **k: stores
    )
    settings = Settings(database_url="postgresql://app:s3cret@127.0.0.1:1/agents")
    transport = httpx.ASGITransport(app=create_app(settings, llm=ScriptedLLM()))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        ready = await client.get("/readyz")
        send = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}
            },
        }
        sent = (await client.post("/", json=send, headers={"A2A-Version": "1.0"})).json()
        got = await client.get("/tasks/t-1", headers={"A2A-Version": "1.0"})
    assert ready.status_code == 503
    assert ready.json() == {"status": "unavailable", "stores": "unreachable"}
    assert stores.pings == 1
    assert sent["error"]["data"][0]["reason"] == "STORE_UNAVAILABLE", sent
    assert got.status_code == 503, got.text
    assert "s3cret" not in ready.text + str(sent) + got.text


def test_the_default_server_loads_no_database_driver() -> None:
    probe = (
        "import sys; from app.main import create_app; from app.settings import Settings;"
        " create_app(Settings());"
        " print(sorted({m.split('.')[0] for m in sys.modules} & {'asyncpg', 'aiosqlite'}),"
        " sorted(m for m in sys.modules if m.startswith(('stores.postgres', 'stores.sqlite'))))"
    )
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "DATABASE_URL": ""}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[] []", out.stdout + out.stderr
