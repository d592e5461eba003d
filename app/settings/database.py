"""DATABASE_URL: which SQL database holds the stores, read and checked once, and how it is named
in a log line (never with its credentials).

    postgresql://user:password@host:port/db   (or postgres://; `?host=/run/postgresql` for a socket)
    sqlite:///relative/path.db                (relative to the server's working directory)
    sqlite:////absolute/path.db

A malformed URL is refused when the settings are read (the server exits 2 with one line); the
message never repeats the URL, which may hold a password.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Annotated, Literal
from urllib.parse import parse_qs, urlsplit

from pydantic import AfterValidator, SecretStr

POSTGRES_SCHEMES = ("postgresql", "postgres")
SQLITE_PREFIX = "sqlite:///"
DEFAULT_POSTGRES_PORT = 5432


@dataclass(frozen=True, slots=True)
class Database:
    """A checked DATABASE_URL: its backend, the URL itself (credentials included: for the
    store's factory only) and what the startup log may say of it."""

    kind: Literal["postgresql", "sqlite"]
    url: str
    shown: str
    """`url=<postgresql://host:port/db>` or `path=<...>`: the address without credentials."""

    @classmethod
    def parse(cls, url: str) -> Database:
        """ValueError (one line, without the URL) when it names no database this server opens."""
        scheme = url.partition(":")[0].lower()
        if scheme in POSTGRES_SCHEMES:
            return cls("postgresql", url, f"url=<{_postgres_address(url)}>")
        if scheme == "sqlite":
            return cls("sqlite", url, f"path=<{os.path.abspath(_sqlite_file(url))}>")
        raise ValueError(
            "DATABASE_URL must start with postgresql://, postgres:// or sqlite:/// (SQLite:"
            " sqlite:///relative.db or sqlite:////absolute.db)"
        )


def _postgres_address(url: str) -> str:
    """`postgresql://host:port/db`, checked: a host (or a `host=` query), a database name."""
    parts = urlsplit(url)
    try:
        port = parts.port or DEFAULT_POSTGRES_PORT
    except ValueError:
        raise ValueError("DATABASE_URL has a port that is not a number from 0 to 65535") from None
    sockets = ",".join(parse_qs(parts.query).get("host", []))  # a Unix socket's directory
    host = parts.hostname
    if not host and not sockets:
        raise ValueError("DATABASE_URL names no host (postgresql://user:password@host:port/db)")
    database = parts.path.removeprefix("/")
    if not database or "/" in database:
        raise ValueError("DATABASE_URL names no database (postgresql://user:password@host:port/db)")
    if not host:
        return f"postgresql:///{database}?host={sockets}"
    if ":" in host:  # an IPv6 address, as a URL writes it
        host = f"[{host}]"
    return f"postgresql://{host}:{port}/{database}"


def _sqlite_file(url: str) -> str:
    """The file of `sqlite:///relative.db` (`relative.db`) or `sqlite:////abs.db` (`/abs.db`)."""
    if not url.lower().startswith(SQLITE_PREFIX):
        raise ValueError(
            "DATABASE_URL: a SQLite URL names a file and no host: sqlite:///relative.db or"
            " sqlite:////absolute.db"
        )
    path = url[len(SQLITE_PREFIX) :].partition("?")[0]
    if not path or path.endswith("/"):
        raise ValueError(
            "DATABASE_URL names no SQLite file (sqlite:///relative.db or sqlite:////absolute.db)"
        )
    return path


def _database_url(value: SecretStr | None) -> SecretStr | None:
    if value is not None:
        Database.parse(value.get_secret_value())  # raises ValueError saying what is wrong
    return value


DatabaseUrl = Annotated[SecretStr | None, AfterValidator(_database_url)]
"""DATABASE_URL: a secret (a PostgreSQL URL holds a password), checked when it is read."""
