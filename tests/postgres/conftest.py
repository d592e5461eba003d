"""Fixtures for the PostgreSQL store tests: the test process's database, emptied per test
(tests/postgres_stores.py), and replicas on it (each a `PostgresStores` of its own, as two
server processes would have)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from stores.postgres.factory import PostgresStores, create_postgres_stores
from tests.postgres_stores import empty_database

Replicas = Callable[..., PostgresStores]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/postgres/" in item.nodeid:
            item.add_marker(pytest.mark.postgres)


@pytest.fixture
async def database() -> str:
    return await empty_database()


@pytest.fixture
async def replicas(database: str) -> AsyncIterator[Replicas]:
    """`replicas(**options)`: another replica's stores on the test's database."""
    made: list[PostgresStores] = []

    def replica(**options: object) -> PostgresStores:
        settings: dict[str, object] = {"ttl_s": 3600, "pool_size": 4, **options}
        url = str(settings.pop("url", database))
        stores = create_postgres_stores(url, **settings)  # type: ignore[arg-type]
        made.append(stores)
        return stores

    yield replica
    for stores in made:
        await stores.aclose()
