"""The server must stay responsive while its model adapter is still loading.

This module deliberately starts testing as soon as /healthz answers (``WAIT_READY = False``), so
the first request reaches the server while LiteLLM may still be importing.
"""

from __future__ import annotations

import time

import pytest

from tests.e2e.harness import TERMINAL_STATES
from tests.e2e.wire import artifact_text
from tests.fakes.fake_llm import text

pytestmark = pytest.mark.timeout(60)

WAIT_READY = False


def test_first_model_call_does_not_block_other_requests(rpc, fake_llm, marker):
    fake_llm.script(text("warm answer", when_user_contains=marker))
    t0 = time.monotonic()
    task = rpc.send(f"first ever {marker}", configuration={"returnImmediately": True})
    took = time.monotonic() - t0
    assert took < 1.0, f"returnImmediately SendMessage took {took:.2f}s on a fresh server"

    worst, probes = 0.0, []
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        t1 = time.monotonic()
        r = rpc.get("/healthz")
        got = rpc.get_task(task["id"])
        lat = time.monotonic() - t1
        probes.append((round(t1 - t0, 2), round(lat, 2), got["status"]["state"]))
        assert r.status_code == 200
        worst = max(worst, lat)
        time.sleep(0.1)
    assert worst < 1.0, (
        f"server stalled for {worst:.2f}s while the first turn was running "
        f"(probes: start offset, latency, state): {probes}"
    )
    done = rpc.wait_for_state(task["id"], TERMINAL_STATES, timeout=30)
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", done["status"]
    assert artifact_text(done) == "warm answer"
