"""The server without the private names of other libraries (issue 41): an `a2a-server` started
with asyncio's running-task hooks removed before it is imported, and one without uvicorn's
request-task hook and `servers` as well (tests/e2e/without_private_names/sitecustomize.py),
serve a SendMessage, a SendStreamingMessage and a GetTask with the same wire results as the
server with them."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import (
    ROOT,
    RpcClient,
    ServerProcess,
    describe,
    kind_of,
    send_params,
    state_of,
    stream_results,
)
from tests.e2e.wire import artifact_text, parts_text
from tests.fakes.fake_llm import text

pytestmark = pytest.mark.timeout(90)

WITHOUT = Path(__file__).resolve().parent / "without_private_names"
CHUNKS = ["The ", "same ", "answer", "!"]
# What differs from one exchange to the next however the server is built.
_VARYING = {"id", "taskId", "contextId", "messageId", "artifactId", "timestamp"}


@pytest.fixture(scope="module", params=["asyncio", "asyncio,uvicorn"])
def public_server(request: pytest.FixtureRequest, fake_llm: Any) -> Iterator[ServerProcess]:
    path = os.pathsep.join([str(WITHOUT), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {"PYTHONPATH": path, "WITHOUT_PRIVATE_NAMES": request.param}
    with ServerProcess(fake_llm.base_url, env=env).running() as proc:
        yield proc


@pytest.fixture(scope="module")
def public_rpc(public_server: ServerProcess) -> Iterator[RpcClient]:
    client = RpcClient(public_server.url)
    try:
        yield client
    finally:
        client.close()


def _exchange(rpc: RpcClient, fake_llm: Any, marker: str) -> dict[str, Any]:
    """A SendMessage, a SendStreamingMessage and a GetTask of each task, as the wire gives them
    (ids and times left out)."""
    fake_llm.script(text(CHUNKS, when_user_contains=f"blocking {marker}"))
    fake_llm.script(text(CHUNKS, chunk_delay=0.02, when_user_contains=f"streaming {marker}"))
    sent = rpc.result("SendMessage", send_params(f"blocking {marker}"))
    task = sent["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
    assert artifact_text(task) == "".join(CHUNKS)
    with rpc.stream("SendStreamingMessage", send_params(f"streaming {marker}")) as stream:
        assert stream.status_code == 200 and stream.content_type.startswith("text/event-stream")
        events = stream_results(list(stream.sse_events()), stream.request_id)
    seq = describe(events)
    assert kind_of(events[0]) == "task" and state_of(events[-1]) == "TASK_STATE_COMPLETED", seq
    streamed = "".join(
        parts_text(event["artifactUpdate"]["artifact"]["parts"])
        for event in events
        if kind_of(event) == "artifactUpdate"
    )
    assert streamed == "".join(CHUNKS), seq
    got = [rpc.result("GetTask", {"id": each["id"]}) for each in (task, events[0]["task"])]
    assert [each["status"]["state"] for each in got] == ["TASK_STATE_COMPLETED"] * 2
    return _without_varying(
        {"sent": sent, "streamed": [kind_of(event) for event in events], "got": got},
        marker,
    )


def _without_varying(value: Any, marker: str) -> Any:
    if isinstance(value, dict):
        return {
            key: "<varies>" if key in _VARYING else _without_varying(item, marker)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_without_varying(item, marker) for item in value]
    if isinstance(value, str):
        return value.replace(marker, "<marker>")
    return value


def test_without_the_private_names_the_wire_is_the_same(
    rpc: RpcClient, public_rpc: RpcClient, fake_llm: Any, marker: str
) -> None:
    with_them = _exchange(rpc, fake_llm, f"{marker}-fast")
    without_them = _exchange(public_rpc, fake_llm, f"{marker}-public")
    assert without_them == with_them


def test_the_server_says_which_path_it_took(
    server: ServerProcess, public_server: ServerProcess
) -> None:
    public_logs = public_server.logs(limit=None)
    without = public_server.extra_env["WITHOUT_PRIVATE_NAMES"].split(",")
    assert "Error in sitecustomize" not in public_logs
    if without == ["asyncio"]:  # uvicorn's hook in use: the first step waits for the loop
        assert "asyncio's running-task hooks are missing" in public_logs
    else:  # uvicorn's own request tasks: asyncio's hooks are not looked for
        assert "request-task hooks are missing" in public_logs
        assert "listening servers are not where they were" in public_logs
    fast_logs = server.logs(limit=None)
    assert "hooks are missing" not in fast_logs and "not where they were" not in fast_logs
    # Both are `a2a-server`: each froze its loaded heap once its model adapter was ready.
    for logs in (fast_logs, public_logs):
        frozen = re.search(r"frozen_objects=<(\d+)>", logs)
        assert frozen is not None and int(frozen.group(1)) > 10_000, logs[-2000:]
