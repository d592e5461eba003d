"""The provider fakes' self-tests drive LiteLLM in one event loop per module, and close its
cached HTTP clients before that loop ends: a pooled connection left to the garbage collector
after its loop closed is an unclosed-transport warning (an error in this suite)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from agent.llm.litellm import import_litellm


@pytest_asyncio.fixture(scope="module", loop_scope="module", autouse=True)
async def _litellm_clients_closed() -> AsyncIterator[None]:
    yield
    litellm = import_litellm()
    from litellm.llms.custom_httpx.async_client_cleanup import close_litellm_async_clients  # noqa: TID251

    await close_litellm_async_clients()
    litellm.in_memory_llm_clients_cache.flush_cache()
