"""What a replica that cannot reach Redis answers, probed from outside all at once.

While Redis does not answer the replica (Redis frozen or killed, or the replica cut off from it),
each of GetTask and SendMessage (JSON-RPC) and GET /tasks/{id} and POST /message:send (REST),
started at once, must fail with the clean store-unavailable error (JSON-RPC -32603 with ErrorInfo
STORE_UNAVAILABLE; REST 503 with the same) within FAIL_BOUND_S, /readyz must say 503 within
READY_BOUND_S, and /healthz stays 200. The bounds are generous on purpose: they bound a fault's
time to an error, they are not speed measurements.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from tests.e2e.harness import A2A_HEADERS, send_params
from tests.e2e_chaos.client import error_reason

FAIL_BOUND_S = 4.0
READY_BOUND_S = 5.0


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.monotonic()
    try:
        out = fn()
    except httpx.HTTPError as exc:
        out = exc
    return out, time.monotonic() - t0


def rpc_unavailable(r: Any) -> str | None:
    """None if `r` is the clean JSON-RPC store-unavailable error, else what it is."""
    if not isinstance(r, httpx.Response):
        return f"no answer: {r!r}"
    if r.status_code != 200 or "Traceback" in r.text:
        return f"HTTP {r.status_code}: {r.text[:300]}"
    err = r.json().get("error")
    if not err or err.get("code") != -32603 or error_reason(err.get("data")) != "STORE_UNAVAILABLE":
        return f"not the store-unavailable error: {r.text[:300]}"
    return None


def rest_unavailable(r: Any) -> str | None:
    if not isinstance(r, httpx.Response):
        return f"no answer: {r!r}"
    if r.status_code != 503 or "Traceback" in r.text:
        return f"HTTP {r.status_code}: {r.text[:300]}"
    error = r.json().get("error") or {}
    if error.get("code") != 503 or error_reason(error.get("details")) != "STORE_UNAVAILABLE":
        return f"not the store-unavailable error: {r.text[:300]}"
    return None


def first_503(url: str, bound: float) -> tuple[int | None, float]:
    """Poll /readyz until it says 503 (or a little past the bound); the status and when."""
    t0 = time.monotonic()
    last: int | None = None
    with httpx.Client(trust_env=False, timeout=bound + 5) as http:
        while time.monotonic() - t0 < bound + 2:
            try:
                last = http.get(url + "/readyz").status_code
            except httpx.HTTPError:
                last = None
            if last == 503:
                break
            time.sleep(0.1)
    return last, time.monotonic() - t0


def probe_outage(url: str, task_id: str, marker: str) -> list[str]:
    """All the checks made on the replica at `url` while Redis does not answer it, at once;
    what went wrong."""
    with httpx.Client(trust_env=False, timeout=3 * FAIL_BOUND_S) as http:

        def rpc(method: str, params: Any) -> httpx.Response:
            body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
            return http.post(url + "/", json=body, headers=A2A_HEADERS)

        probes: dict[str, tuple[Callable[[], Any], Callable[[Any], str | None]]] = {
            "GetTask": (lambda: rpc("GetTask", {"id": task_id}), rpc_unavailable),
            "SendMessage": (
                lambda: rpc("SendMessage", send_params(f"outage {marker}")),
                rpc_unavailable,
            ),
            "REST GET /tasks/{id}": (
                lambda: http.get(f"{url}/tasks/{task_id}", headers=A2A_HEADERS),
                rest_unavailable,
            ),
            "REST POST /message:send": (
                lambda: http.post(
                    f"{url}/message:send", json=send_params(f"outage {marker}"), headers=A2A_HEADERS
                ),
                rest_unavailable,
            ),
        }
        with ThreadPoolExecutor(max_workers=len(probes) + 1) as pool:
            ready = pool.submit(first_503, url, READY_BOUND_S)
            futures = {name: pool.submit(timed, call) for name, (call, _) in probes.items()}
            problems = []
            for name, future in futures.items():
                answer, took = future.result()
                wrong = probes[name][1](answer)
                if wrong:
                    problems.append(f"{name}: {wrong}")
                elif took > FAIL_BOUND_S:
                    problems.append(f"{name}: the error took {took:.1f}s (bound {FAIL_BOUND_S}s)")
            status, took = ready.result()
            if status != 503 or took > READY_BOUND_S:
                problems.append(
                    f"/readyz: {status} after {took:.1f}s (want 503 within {READY_BOUND_S}s)"
                )
        health = http.get(url + "/healthz").status_code
        if health != 200:
            problems.append(f"/healthz {health} while Redis is out")
    return problems
