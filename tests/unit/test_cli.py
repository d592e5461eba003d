"""The command line: bad configuration is a clear message and exit status 2, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"REDIS_URL": "http://127.0.0.1:6379"}, "REDIS_URL must start with redis://"),
        ({"AGENT_MAX_ITERATIONS": "0"}, "agent_max_iterations"),
        ({"AGENT_TOOLS": "no_such_module:tool"}, "cannot load tool 'no_such_module:tool'"),
        ({"AGENT_HOOKS": "agent.hooks:ApprovalRequired"}, "cannot create hook"),
        ({"AGENT_TOOL_FAILURE_MODE": "explode"}, "agent_tool_failure_mode"),
    ],
)
def test_bad_configuration_exits_2_with_a_message(env: dict[str, str], says: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "app", "--port", "0"],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert says in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ('[{"uri": "urn:a"', "A2A_EXTENSIONS is not valid JSON"),
        ('[{"description": "no uri"}]', "A2A_EXTENSIONS[0] needs a `uri`"),
        ("/no/such/extensions.json", "cannot read the extensions file '/no/such/extensions.json'"),
    ],
)
def test_a_bad_a2a_extensions_stops_the_server_with_one_line(value: str, says: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "app", "--port", "0"],
        cwd=ROOT,
        env={**os.environ, "A2A_EXTENSIONS": value},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("a2a-server: invalid configuration: a2a_extensions: "), line
    assert says in line


@pytest.mark.parametrize(
    ("env", "line"),
    [
        (
            {"LLM_PARAMS": '["temperature", 0.2]'},
            "a2a-server: invalid configuration: llm_params: LLM_PARAMS must be a JSON object"
            " of model parameters",
        ),
        (
            {"LLM_PARAMS": '{"model": "openai/gpt-4o"}'},
            "a2a-server: invalid configuration: llm_params: LLM_PARAMS: 'model' is set by the"
            " server (LLM_MODEL), not here",
        ),
        (
            {"LLM_FALLBACK_MODELS": '[{"model": "a"}, {"api_key": "k", "bogus": 1}]'},
            "a2a-server: invalid configuration: llm_fallback_models: LLM_FALLBACK_MODELS[1] has"
            " an unknown key 'bogus' (model, api_base, api_key)",
        ),
        (
            {"LLM_FALLBACK_MODELS": '{"model": "a"}'},
            "a2a-server: invalid configuration: llm_fallback_models: LLM_FALLBACK_MODELS must be"
            ' a JSON list of {"model", "api_base", "api_key"}',
        ),
    ],
)
def test_bad_model_params_or_fallbacks_stop_the_server_with_one_line(
    env: dict[str, str], line: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "app", "--port", "0"],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [line]
