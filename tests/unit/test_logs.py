"""LOG_FORMAT, the quiet libraries, and what the log says about requests, turns and stores."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from app.main import create_app
from app.ops.logs import (
    JsonFormatter,
    TextFormatter,
    configure_logging,
    lines_written_at_once,
    lines_written_per_loop_pass,
)
from app.services import describe_stores
from app.settings import Settings

from .scripted_llm import ScriptedLLM, text


@pytest.fixture
def restored_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    names = ("LiteLLM", "httpx", "httpcore", "uvicorn", "uvicorn.error", "uvicorn.access")
    saved = {name: vars(logging.getLogger(name)).copy() for name in names}
    yield
    root.handlers, root.level = handlers, level
    for name, state in saved.items():
        vars(logging.getLogger(name)).update(state)


@pytest.mark.usefixtures("restored_logging")
def test_json_lines_carry_the_key_value_fields_and_uvicorn_goes_through_them() -> None:
    out = io.StringIO()
    configure_logging(Settings(log_format="json"), stream=out)
    logging.getLogger("app.test").info("task_id=<%s>, state=<%s> | turn ended", "t-1", "done")
    logging.getLogger("uvicorn.error").info("Started server process")
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["level"] == "INFO" and first["logger"] == "app.test"
    assert first["message"] == "task_id=<t-1>, state=<done> | turn ended"
    assert (first["task_id"], first["state"]) == ("t-1", "done")
    assert first["time"].endswith("+00:00")
    assert second["logger"] == "uvicorn.error" and second["message"] == "Started server process"


@pytest.mark.usefixtures("restored_logging")
def test_litellm_is_quiet_unless_debug() -> None:
    out = io.StringIO()
    configure_logging(Settings(), stream=out)
    logging.getLogger("LiteLLM").info("litellm.acompletion(model=x) 200 OK")
    assert out.getvalue() == ""
    configure_logging(Settings(log_level="debug"), stream=out)
    logging.getLogger("LiteLLM").info("litellm.acompletion(model=x) 200 OK")
    assert "200 OK" in out.getvalue()


def test_the_store_backend_is_named_without_credentials() -> None:
    assert describe_stores(Settings()) == "stores=<memory>"
    redis = Settings(redis_url="redis://user:s3cret@redis.internal:6380/2")
    assert describe_stores(redis) == "stores=<redis>, url=<redis://redis.internal:6380/2>"


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


async def test_one_line_per_request_and_per_turn_without_message_text(
    llm: ScriptedLLM, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    llm.script(text("the secret answer"))
    app = create_app(Settings(llm_model="openai/not-called"), llm=llm)
    transport = httpx.ASGITransport(app=app)
    message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "private question"}]}
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        reply = (await client.post("/", json=rpc("SendMessage", {"message": message}))).json()
        task = reply["result"]["task"]
        await client.post("/", json=rpc("GetTask", {"id": "missing"}))
    above_debug = [r for r in caplog.records if r.levelno > logging.DEBUG]
    lines = [r.getMessage() for r in above_debug]
    turns = [line for line in lines if line.endswith("| turn ended")]
    assert len(turns) == 1
    assert f"task_id=<{task['id']}>, context_id=<{task['contextId']}>" in turns[0]
    assert "state=<TASK_STATE_COMPLETED>" in turns[0] and "model_calls=<1>" in turns[0]
    requests = [line for line in lines if line.endswith("| request")]
    assert len(requests) == 2
    assert "method=<SendMessage>, binding=<jsonrpc>, outcome=<ok>" in requests[0]
    assert "owner=<" in requests[0]
    assert "method=<GetTask>" in requests[1] and "outcome=<TASK_NOT_FOUND>" in requests[1]
    assert "task_id=<missing>" in requests[1]
    assert not [line for line in lines if "private question" in line or "secret answer" in line]


class CountedWrites(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


@pytest.mark.parametrize("created", [1_764_129_600.0, 1_764_129_600.25, 1_764_129_659.999])
def test_times_are_logging_s_own_format_with_seconds_rendered_once(created: float) -> None:
    record = logging.makeLogRecord({"msg": "m", "created": created, "msecs": 0})
    record.msecs = int((created - int(created)) * 1000)
    text = TextFormatter()
    assert text.formatTime(record) == logging.Formatter().formatTime(record)
    assert text.formatTime(record) == text.formatTime(record)  # the cached second
    logged = json.loads(JsonFormatter().format(record))["time"]
    expected = datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")
    assert logged == expected


@pytest.fixture
def counted(restored_logging: None) -> CountedWrites:
    """The server's log configured to write to a stream that counts its writes."""
    out = CountedWrites()
    configure_logging(Settings(), stream=out)
    return out


def messages(out: CountedWrites) -> list[str]:
    return [line.split(": ", 1)[1] for line in out.getvalue().splitlines()]


async def test_lines_logged_on_the_loop_are_written_once_per_pass_in_order(
    counted: CountedWrites,
) -> None:
    out, log = counted, logging.getLogger("app.test")
    with lines_written_per_loop_pass(asyncio.get_running_loop()):
        for n in range(3):
            log.info("line %d", n)
        assert (out.writes, out.getvalue()) == (0, "")  # waiting for the end of the pass
        await asyncio.sleep(0)
        assert out.writes == 1
        log.info("line 3")
        # Another thread's line is written at once, after the one still waiting.
        await asyncio.to_thread(log.info, "from a thread")
        assert out.writes == 3
        log.info("line 4")
    assert out.writes == 4  # the waiting line is written when the loop's use ends
    assert messages(out) == [*(f"line {n}" for n in range(4)), "from a thread", "line 4"]


async def test_lines_are_written_at_once_when_the_server_is_about_to_stop(
    counted: CountedWrites,
) -> None:
    out, log = counted, logging.getLogger("app.test")
    with lines_written_per_loop_pass(asyncio.get_running_loop()):
        log.info("waiting")
        lines_written_at_once()  # a stop signal came: the process may end before the next pass
        assert out.writes == 1
        log.info("at once")
        assert out.writes == 2
    assert messages(out) == ["waiting", "at once"]
