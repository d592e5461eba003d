"""`a2a-server` / `python -m app`: serve the agent. Flags override the environment.
`a2a-server migrate` migrates DATABASE_URL's PostgreSQL schema and exits.

The process is the server's own, so this command also tunes it: the collector's thresholds, and
the loaded heap frozen once the model adapter has loaded. `create_app` does neither, so that an
app embedded in another process leaves its host's collector as it was.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import sys
from functools import partial
from urllib.parse import urlsplit

import uvicorn
from fastapi import FastAPI
from pydantic import ValidationError

from agent.hooks import HookLoadError
from agent.tools.base import ToolLoadError
from app.a2a.card_signing import CardSigningError
from app.extensions import ExtensionDeclarationError
from app.grpc import GrpcConfigurationError
from app.http.auth import AuthConfigurationError
from app.http.connections import raise_open_files_limit, with_limits
from app.http.server import DrainingServer
from app.main import create_app
from app.ops.logs import configure_logging
from app.settings import Settings
from app.settings.agents_file import AgentsFileError
from app.settings.database import Database
from app.storage import StorageConfigurationError
from stores.errors import StoreLocked

logger = logging.getLogger(__name__)

# The server process's collector thresholds (CPython's defaults are 700, 10, 10); an app embedded
# in another process (`create_app`) leaves its host's alone. The server makes almost no cyclic
# garbage (reference counting frees nearly all of it), so a collector pass mostly walks live
# objects for nothing, and with the defaults full passes walking every stored task made the
# latency tail. A young pass comes after 50,000 more container objects than were freed: well
# above what the requests in flight hold alive. A full pass waits for 100 middle ones (and
# CPython's own rule: a quarter more long-lived objects than at the last). The measures:
# bench/RESULTS.md, "Figures moved out of docstrings (issue 41)".
COLLECTOR_THRESHOLDS = (50_000, 10, 100)


def freeze_loaded_objects() -> int:
    """Move every object alive now (modules, classes, pydantic schemas: what startup and the
    model adapter loaded, and what lives as long as the process) to the collector's permanent
    generation, once per process, so that full collections stop walking them again and again.
    The server process's own choice, as its thresholds are; returns the objects frozen."""
    if gc.get_freeze_count() == 0:
        gc.collect()
        gc.freeze()
    return gc.get_freeze_count()


async def freeze_when_ready(model_ready: asyncio.Event) -> None:
    """Once the app's model adapter has loaded (`app.state.model_ready`), freeze what is loaded."""
    await model_ready.wait()
    frozen = freeze_loaded_objects()
    logger.info("frozen_objects=<%d> | the loaded heap is out of the collector's reach", frozen)


def server_config(app: FastAPI, settings: Settings) -> uvicorn.Config:
    """uvicorn's configuration, with the connection limits: a deadline on request headers, an
    idle timeout, a cap on header size and one on concurrent connections (503 beyond)."""
    return uvicorn.Config(
        app,
        host=settings.a2a_host,
        port=settings.a2a_port,
        log_level=settings.log_level.lower(),
        log_config=None,  # app.ops.logs configured logging (LOG_FORMAT): uvicorn keeps it
        # Connections get three quarters of the grace; the rest is for the lifespan's hand-over
        # of running turns, so the process is gone within A2A_SHUTDOWN_GRACE_S.
        timeout_graceful_shutdown=max(1, int(settings.a2a_shutdown_grace_s * 0.75)),
        http=with_limits(settings.a2a_header_timeout_s, settings.a2a_max_header_bytes),
        timeout_keep_alive=settings.a2a_keep_alive_timeout_s,
        h11_max_incomplete_event_size=settings.a2a_max_header_bytes,
        limit_concurrency=settings.a2a_max_connections,
        # uvicorn's own X-Forwarded-Proto/-For handling (scheme, client address) follows
        # A2A_TRUST_FORWARDED too: off, no peer may set them; on, the proxy in front is trusted.
        proxy_headers=settings.a2a_trust_forwarded,
        forwarded_allow_ips="*" if settings.a2a_trust_forwarded else None,
    )


def serve(app: FastAPI, settings: Settings) -> int:
    """Serve until SIGTERM / SIGINT; 3 if the server could not start (uvicorn's code)."""
    raise_open_files_limit(settings.a2a_max_connections)
    server = DrainingServer(
        server_config(app, settings),
        drain=app.state.drain,
        background=partial(freeze_when_ready, app.state.model_ready),
    )
    server.run()
    return 0 if server.started else 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="a2a-server", description="Serve an A2A agent.")
    parser.add_argument("--host", help="bind address (A2A_HOST, default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (A2A_PORT, default 8000)")
    commands = parser.add_subparsers(dest="command", metavar="{migrate}")
    commands.add_parser(
        "migrate",
        help="bring DATABASE_URL's PostgreSQL schema to this version, print it, and exit",
        description="Migrate DATABASE_URL's PostgreSQL schema to this version (forward only,"
        " under an advisory lock), print the version, exit. Servers migrate at start too; this"
        " is for a deploy step that runs before them.",
    )
    args = parser.parse_args(argv)
    overrides = {
        name: value
        for name, value in (("a2a_host", args.host), ("a2a_port", args.port))
        if value is not None
    }
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        for error in exc.errors():  # one line each: the setting, and what is wrong with it
            where = ".".join(str(part) for part in error["loc"])
            why = str(error["msg"]).removeprefix("Value error, ")
            named = f"{where}: " if where else ""  # a check of several settings names them
            print(f"a2a-server: invalid configuration: {named}{why}", file=sys.stderr)
        return 2
    if args.command == "migrate":
        return migrate(settings)
    configure_logging(settings)
    try:
        app = create_app(settings)
    except (ToolLoadError, HookLoadError, ExtensionDeclarationError) as exc:
        print(f"a2a-server: {exc}", file=sys.stderr)
        return 2
    except AuthConfigurationError as exc:
        print(f"a2a-server: unsafe configuration: {exc}", file=sys.stderr)
        return 2
    except (CardSigningError, GrpcConfigurationError) as exc:
        print(f"a2a-server: {exc}", file=sys.stderr)
        return 2
    except AgentsFileError as exc:  # names the file, the agent and the key
        print(f"a2a-server: invalid agents file: {exc}", file=sys.stderr)
        return 2
    except (StoreLocked, StorageConfigurationError) as exc:  # another server's SQLite file
        print(f"a2a-server: {exc}", file=sys.stderr)
        return 2
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
    return serve(app, settings)


def migrate(settings: Settings) -> int:
    """`a2a-server migrate`: DATABASE_URL's PostgreSQL schema brought to this version, once.
    0 and the version on stdout; 2 when DATABASE_URL names no PostgreSQL (SQLite migrates its
    file when a server opens it); 1 when the database cannot be reached or refuses. One line."""
    database = settings.database
    if database is None or database.kind != "postgresql":
        why = (
            "DATABASE_URL is not set"
            if database is None
            else "DATABASE_URL names SQLite, whose file the server migrates when it opens it"
        )
        print(f"a2a-server migrate: {why}; nothing to migrate but PostgreSQL", file=sys.stderr)
        return 2
    try:
        from stores.postgres.migrations import migrate as migrate_schema

        version = int(asyncio.run(migrate_schema(database.url)))
    except Exception as exc:  # unreachable, credentials refused, no such database: one line
        print(
            f"a2a-server migrate: cannot migrate {database.shown}: {_one_line(exc, database)}",
            file=sys.stderr,
        )
        return 1
    print(f"a2a-server migrate: {database.shown} is at schema version {version}")
    return 0


def _one_line(exc: Exception, database: Database) -> str:
    """The error's first line, without the URL's password should a driver repeat it."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if password := urlsplit(database.url).password:
        text = text.replace(password, "***")
    return text
