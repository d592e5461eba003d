"""The suite-wide guard in tests/conftest.py: nothing leaves this machine, loopback still works."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest

BLOCKED_ADDRESSES = ["192.0.2.1", "203.0.113.7", "8.8.8.8", "2001:db8::1", "::ffff:8.8.8.8"]


@pytest.mark.parametrize("host", BLOCKED_ADDRESSES)
def test_socket_connect_off_machine_is_refused(host: str) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        with pytest.raises(ConnectionRefusedError, match="off this machine"):
            sock.connect((host, 443))


def test_connect_ex_off_machine_is_refused() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        with pytest.raises(ConnectionRefusedError):
            sock.connect_ex(("192.0.2.1", 443))


@pytest.mark.parametrize("host", ["api.openai.com", "api.anthropic.com", "192.0.2.1"])
def test_create_connection_off_machine_is_refused(host: str) -> None:
    with pytest.raises(ConnectionRefusedError, match="off this machine"):
        socket.create_connection((host, 443), timeout=0.5)


async def test_asyncio_connections_off_machine_are_refused() -> None:
    with pytest.raises(OSError):
        await asyncio.wait_for(asyncio.open_connection("192.0.2.1", 443), 2)


async def test_loopback_is_allowed() -> None:
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        for host in ("127.0.0.1", "localhost"):
            _reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 2)
            writer.close()
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass
    finally:
        server.close()
        await server.wait_closed()


def test_litellm_uses_the_local_cost_map() -> None:
    assert os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
