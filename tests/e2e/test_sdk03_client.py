"""A real a2a-sdk 0.3.x client, in a venv of its own (`.venv-a2a03`, from this directory's
hash-locked `sdk03/requirements.lock`; `make test` builds it), against a real server, over both bindings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.fake_llm import text, tool_calls

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
PYTHON03 = ROOT / ".venv-a2a03" / "bin" / "python"
CLIENT = Path(__file__).with_name("sdk03") / "client03.py"


@pytest.mark.parametrize("transport", ["JSONRPC", "HTTP+JSON"])
def test_a_03_sdk_client_runs_every_operation(server, fake_llm, marker, transport) -> None:
    assert PYTHON03.exists(), (
        f"{PYTHON03} is missing: `make test` (or `make interop-venv`) builds it"
    )
    fake_llm.script(
        text("Hello from the agent.", when_user_contains=f"hello {marker}"),
        text(["Stre", "amed."], when_user_contains=f"stream {marker}"),
        tool_calls([("ask_user", {"question": "Which?"})], when_user_contains=f"ask {marker}"),
        text("Eventually.", delay=1.0, when_user_contains=f"slow {marker}"),
    )
    run = subprocess.run(
        [str(PYTHON03), str(CLIENT), server.url, transport, marker],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert run.returncode == 0, f"the 0.3 client failed:\n{run.stderr[-3000:]}"
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["card"] == {"url": server.url, "preferred": "JSONRPC"}
    assert seen["send"] == {"state": "completed", "text": "Hello from the agent."}
    assert seen["get"] == {"state": "completed", "history": 1}
    assert seen["stream"]["state"] == "completed"
    assert seen["stream"]["text"] == "Streamed."
    assert seen["stream"]["kinds"] == ["artifact-update", "status-update", "task"]
    assert seen["cancel"] == {"before": "input-required", "after": "canceled"}
    assert seen["resubscribe"]["first"] in ("submitted", "working")
    assert seen["resubscribe"]["last"] == "completed"


def test_the_client_venv_is_the_03_sdk() -> None:
    assert PYTHON03.exists(), f"{PYTHON03} is missing: `make test` builds it"
    version = subprocess.run(
        [str(PYTHON03), "-c", "import importlib.metadata as m; print(m.version('a2a-sdk'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert version.startswith("0.3."), version
    assert sys.executable != str(PYTHON03)
