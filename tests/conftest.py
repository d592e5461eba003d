"""Suite-wide guard: no test may reach a real LLM provider (or anything else off this machine).

Every test runs with outbound connections refused unless they go to a loopback address
(127.0.0.0/8, ::1, ``localhost``) or a Unix socket. LiteLLM is also told to use its bundled model
cost map instead of downloading one at import time.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# The end-to-end suites import `tests.*` helpers and hand the repository to servers as PYTHONPATH.
ROOT = str(Path(__file__).resolve().parents[1])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

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


# --- Shared by the end-to-end suites (tests/e2e, tests/e2e_engine, tests/e2e_redis) ---------------


@pytest.fixture(scope="module")
def fake_llm() -> Iterator[Any]:
    """An OpenAI-compatible fake model on loopback, one per test module."""
    from tests.fakes.fake_llm import FakeLLMServer

    with FakeLLMServer() as llm:
        yield llm


@pytest.fixture
def marker(request: pytest.FixtureRequest) -> str:
    """A unique string to put in user messages and key the fake model's replies on."""
    return f"mk-{request.node.name[:24]}-{uuid.uuid4().hex[:8]}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """On failure, attach the logs of every server process the test used."""
    report = yield
    if report.failed and call.when in ("call", "setup"):
        for name, value in getattr(item, "funcargs", {}).items():
            logs = getattr(value, "logs", None)
            if callable(logs) and type(value).__name__ in ("ServerProcess", "Cluster"):
                report.sections.append((f"a2a-server logs ({name})", logs(4000)))
    return report
