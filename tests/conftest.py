"""Suite-wide guard: no test may reach a real LLM provider (or anything else off this machine).

Every test runs with outbound connections refused unless they go to a loopback address
(127.0.0.0/8, ::1, ``localhost``) or a Unix socket. LiteLLM is also told to use its bundled model
cost map instead of downloading one at import time.
"""

from __future__ import annotations

import ipaddress
import os
import socket

import pytest

# LiteLLM reads this when it is imported, which can happen at collection time, before any fixture.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"


class NetworkBlockedError(ConnectionRefusedError):
    """A test tried to connect to a non-loopback address."""


def _is_loopback_host(host: object) -> bool:
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    if not isinstance(host, str):
        return False
    host = host.strip("[]").split("%", 1)[0]  # "[::1]" and scoped "fe80::1%eth0" forms
    if host.lower() in ("localhost", "localhost.", "ip6-localhost", "ip6-loopback"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False  # any other host name: it would resolve to who knows where
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def _check_address(address: object) -> None:
    if isinstance(address, str | bytes):
        return  # AF_UNIX path
    if isinstance(address, tuple) and address and _is_loopback_host(address[0]):
        return
    raise NetworkBlockedError(
        f"tests may not open network connections off this machine (attempted {address!r});"
        " only loopback addresses are allowed"
    )


@pytest.fixture(autouse=True)
def _no_real_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")

    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_create_connection = socket.create_connection

    def guarded_connect(self: socket.socket, address: object) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            _check_address(address)
        return real_connect(self, address)

    def guarded_connect_ex(self: socket.socket, address: object) -> int:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            _check_address(address)
        return real_connect_ex(self, address)

    def guarded_create_connection(
        address: object, *args: object, **kwargs: object
    ) -> socket.socket:
        _check_address(address)
        return real_create_connection(address, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", guarded_connect_ex)
    monkeypatch.setattr(socket, "create_connection", guarded_create_connection)
