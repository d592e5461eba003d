"""uvicorn's access line for a request a binding logs itself is not made at all (no record built
only for the access log's filter to drop it), on the server's own protocol as `a2a-server`
serves; another route keeps its line, still uvicorn's; and without the cycle's `access_logger`
to replace (a uvicorn that renamed it), the filter still drops the line."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from app.http import connections
from app.ops.logs import one_line_per_request

from . import test_response_writes
from .test_response_writes import Connection, rpc_request

connection = test_response_writes.connection  # the fixture: the server's protocol on create_app

pytestmark = pytest.mark.skipif(
    connections.HttpToolsProtocol is None, reason="httptools is not installed"
)

CARD = b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def access_records(monkeypatch: pytest.MonkeyPatch) -> Iterator[Records]:
    """Every record the access logger makes, its filters taken off (put back by monkeypatch)."""
    access = logging.getLogger("uvicorn.access")
    monkeypatch.setattr(access, "filters", [])
    monkeypatch.setattr(access, "level", logging.INFO)
    records = Records()
    access.addHandler(records)
    try:
        yield records
    finally:
        access.removeHandler(records)


async def test_a_binding_request_makes_no_access_record_and_a_card_read_makes_uvicorns(
    connection: Connection,
    access_records: Records,
) -> None:
    await connection.writes_until(rpc_request("SendMessage"), b"}")
    assert access_records.records == []
    await connection.writes_until(CARD, b"}")
    (card,) = access_records.records
    assert "agent-card.json" in card.getMessage()
    assert card.name == "uvicorn.access"
    assert card.pathname.endswith("httptools_impl.py"), card.pathname  # the line is uvicorn's


async def test_without_the_cycles_access_logger_the_filter_drops_the_line(
    connection: Connection,
    access_records: Records,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Another logger object than the cycles carry: as if uvicorn had renamed the attribute.
    monkeypatch.setattr(connections, "_ACCESS_LOGGER", logging.getLogger("not-uvicorn"))
    await connection.writes_until(rpc_request("SendMessage", request_id=2), b"}")
    assert len(access_records.records) == 1  # made, as before the replacement
    one_line_per_request()  # the filter back on the access logger
    access_records.records.clear()
    await connection.writes_until(rpc_request("SendMessage", request_id=3), b"}")
    assert access_records.records == []  # dropped by the filter
    await connection.writes_until(CARD, b"}")
    assert len(access_records.records) == 1  # another route keeps its line
