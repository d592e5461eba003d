"""Run first by the `a2a-server` of tests/e2e/test_public_paths.py (this folder leads its
PYTHONPATH): the private names of other libraries that the server's fast paths use are removed
before the server is imported, as a later Python or uvicorn would lack them. WITHOUT_PRIVATE_NAMES
says which: "asyncio" (its running-task hooks), "uvicorn" (its request-task hook and `servers`),
"redis" (redis-py's parser sentinel, as the batcher finds it missing: bench/fallback_paths.py)."""

from __future__ import annotations

import asyncio.tasks
import os
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

WITHOUT = set(os.environ.get("WITHOUT_PRIVATE_NAMES", "").split(","))

if "asyncio" in WITHOUT:  # its running-task hooks (app.http.request_task): nothing else uses them
    del asyncio.tasks._enter_task, asyncio.tasks._leave_task

if "uvicorn" in WITHOUT:
    # Its request-task hook (app.http.connections): gone while the server looks for it, then
    # back, since uvicorn's own protocol calls it.
    _start_asgi_task = HttpToolsProtocol._start_asgi_task
    del HttpToolsProtocol._start_asgi_task
    import app.http.connections  # noqa: F401

    HttpToolsProtocol._start_asgi_task = _start_asgi_task  # type: ignore[method-assign]

_startup, _shutdown = uvicorn.Server.startup, uvicorn.Server.shutdown


async def _renamed_startup(self: Any, sockets: Any = None) -> None:
    await _startup(self, sockets)
    self.renamed_servers = self.__dict__.pop("servers")


async def _renamed_shutdown(self: Any, sockets: Any = None) -> None:
    self.servers = self.renamed_servers
    await _shutdown(self, sockets)


if "uvicorn" in WITHOUT:  # its listening servers (app.http.server) kept under another name
    uvicorn.Server.startup = _renamed_startup  # type: ignore[method-assign]
    uvicorn.Server.shutdown = _renamed_shutdown  # type: ignore[method-assign]

if "redis" in WITHOUT:  # the batcher reads every reply through redis-py's public read_response
    import stores.redis.batch

    stores.redis.batch._NOT_ENOUGH_DATA = None
