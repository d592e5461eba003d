"""A2A_RATE_LIMIT with Redis: one bucket per principal, shared by every replica."""

from __future__ import annotations

import httpx
import pytest

from tests.e2e.harness import A2A_HEADERS
from tests.e2e_redis.support import keys_with_prefix

pytestmark = pytest.mark.timeout(120)

SERVER_ENV = {
    "A2A_API_KEYS": "alice:alice-key-1,bob:bob-key-2,carol:carol-key-3",
    "A2A_RATE_LIMIT": "4/minute",
}


def list_tasks(url: str, key: str, tenant: str | None = None) -> httpx.Response:
    params = {"tenant": tenant} if tenant else {}
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": params}
    headers = {**A2A_HEADERS, "Authorization": f"Bearer {key}"}
    return httpx.post(url + "/", json=body, headers=headers, trust_env=False, timeout=10)


def test_two_replicas_share_one_bucket_per_principal(replicas, redis_client, prefix):
    a, b = replicas
    codes = [list_tasks(server.url, "alice-key-1").status_code for server in (a, b, a, b)]
    assert codes == [200, 200, 200, 200], codes
    refused = list_tasks(b.url, "alice-key-1")
    assert refused.status_code == 429, refused.text
    assert int(refused.headers["retry-after"]) >= 1, refused.headers
    assert refused.json()["error"]["data"][0]["reason"] == "RATE_LIMITED", refused.text
    refused = httpx.get(
        a.url + "/tasks",
        headers={**A2A_HEADERS, "X-API-Key": "alice-key-1"},
        trust_env=False,
    )
    assert refused.status_code == 429 and "retry-after" in refused.headers, refused.text
    # Another principal has its own bucket; the bucket is in Redis under the prefix.
    assert list_tasks(a.url, "bob-key-2").status_code == 200
    buckets = [key for key in keys_with_prefix(redis_client, prefix) if ":rate:" in key]
    assert len(buckets) == 2, f"the buckets are not in Redis: {buckets}"


def test_a_principal_has_one_bucket_per_tenant_shared_by_every_replica(
    replicas, redis_client, prefix
):
    a, b = replicas
    codes = [list_tasks(server.url, "carol-key-3", "acme").status_code for server in (a, b) * 2]
    assert codes == [200, 200, 200, 200], codes
    assert list_tasks(a.url, "carol-key-3", "acme").status_code == 429
    refused = httpx.get(
        b.url + "/acme/tasks",
        headers={**A2A_HEADERS, "X-API-Key": "carol-key-3"},
        trust_env=False,
    )
    assert refused.status_code == 429, refused.text
    # Within another tenant, and outside every tenant, carol has buckets of her own.
    assert list_tasks(b.url, "carol-key-3", "beta").status_code == 200
    assert list_tasks(a.url, "carol-key-3").status_code == 200
    buckets = [key for key in keys_with_prefix(redis_client, prefix) if "carol" in key]
    assert len(buckets) == 3 and all(":rate:" in key for key in buckets), buckets
