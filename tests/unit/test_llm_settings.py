"""LLM_PARAMS and LLM_FALLBACK_MODELS read from the environment and from an agents file: what is
accepted, and the one-line refusals of what is not."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from agent.llm.fallbacks import ModelRoute
from app.settings import Settings
from app.settings.agents_file import AgentsFileError, load_agents_file


def refusal(**values: str) -> str:
    with pytest.raises(ValidationError) as raised:
        Settings(**values)
    [error] = raised.value.errors()
    return str(error["msg"]).removeprefix("Value error, ")


def test_params_are_a_json_object_passed_as_it_is() -> None:
    params = '{"temperature": 0.2, "max_tokens": 512, "thinking": {"type": "enabled"}}'
    assert Settings(llm_params=params).llm_params == {
        "temperature": 0.2,
        "max_tokens": 512,
        "thinking": {"type": "enabled"},
    }
    assert Settings().llm_params == {}


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("[1, 2]", "LLM_PARAMS must be a JSON object of model parameters"),
        ('"hot"', "LLM_PARAMS must be a JSON object of model parameters"),
        ('{"temperature": ', "LLM_PARAMS is not valid JSON"),
        ('{"model": "x"}', "LLM_PARAMS: 'model' is set by the server (LLM_MODEL), not here"),
        ('{"messages": []}', "LLM_PARAMS: 'messages' is set by the server"),
        ('{"tools": []}', "LLM_PARAMS: 'tools' is set by the server"),
        ('{"stream": false}', "LLM_PARAMS: 'stream' is set by the server"),
        ('{"api_base": "http://x"}', "'api_base' is set by the server (LLM_API_BASE)"),
        ('{"api_key": "k"}', "'api_key' is set by the server (LLM_API_KEY)"),
        ('{"num_retries": 5}', "'num_retries' is set by the server (LLM_NUM_RETRIES)"),
    ],
)
def test_params_that_are_not_an_object_or_name_our_keys_are_refused(value: str, says: str) -> None:
    assert says in refusal(llm_params=value)


def test_fallback_models_with_keys_by_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FALLBACK_KEY", "sk-fallback")
    settings = Settings(
        llm_fallback_models='[{"model": "anthropic/claude-haiku-4-5", "api_key": "${FALLBACK_KEY}"},'
        ' {"model": "openai/gpt-4o-mini", "api_base": "http://127.0.0.1:1/v1"}]'
    )
    assert settings.llm_fallback_models == [
        ModelRoute(model="anthropic/claude-haiku-4-5", api_key="sk-fallback"),
        ModelRoute(model="openai/gpt-4o-mini", api_base="http://127.0.0.1:1/v1"),
    ]
    assert "sk-fallback" not in repr(settings)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ('{"model": "x"}', "LLM_FALLBACK_MODELS must be a JSON list"),
        ("[", "LLM_FALLBACK_MODELS is not valid JSON"),
        ('["openai/gpt-4o"]', "LLM_FALLBACK_MODELS[0] must be an object"),
        ('[{"model": "a"}, {"api_base": "http://x"}]', "LLM_FALLBACK_MODELS[1] needs a `model`"),
        ('[{"model": "a", "temperature": 1}]', "unknown key 'temperature'"),
        ('[{"model": "a", "api_key": 7}]', "LLM_FALLBACK_MODELS[0]: `api_key` must be a string"),
        ('[{"model": "a", "api_key": "${NO_SUCH_VAR_49}"}]', "NO_SUCH_VAR_49 is not set"),
    ],
)
def test_malformed_fallback_models_are_refused_in_one_line(value: str, says: str) -> None:
    message = refusal(llm_fallback_models=value)
    assert says in message
    assert "\n" not in message


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "agents.yaml"
    path.write_text(text)
    return str(path)


def test_an_agents_file_sets_params_and_fallbacks_per_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_KEY_49", "sk-ant")
    path = write(
        tmp_path,
        """
agents:
  - name: careful
    params: {temperature: 0, max_tokens: 800}
    fallback_models:
      - {model: anthropic/claude-haiku-4-5, api_key: "${ANTHROPIC_KEY_49}"}
  - name: plain
""",
    )
    careful, plain = load_agents_file(path)
    assert careful.overrides["llm_params"] == {"temperature": 0, "max_tokens": 800}
    assert careful.overrides["llm_fallback_models"] == [
        ModelRoute(model="anthropic/claude-haiku-4-5", api_key="sk-ant")
    ]
    assert plain.overrides == {}


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("params: [temperature]", "key 'params'"),
        ("params: {model: x}", "key 'params': LLM_PARAMS: 'model' is set by the server"),
        ("fallback_models: [{api_base: 'http://x'}]", "key 'fallback_models"),
        ("fallback_models: {model: x}", "key 'fallback_models'"),
    ],
)
def test_an_agents_file_with_bad_params_or_fallbacks_names_the_agent_and_key(
    tmp_path: Path, entry: str, says: str
) -> None:
    path = write(tmp_path, f"agents:\n  - name: broken\n    {entry}\n")
    with pytest.raises(AgentsFileError) as raised:
        load_agents_file(path)
    assert f"{path}: agent 'broken': " in str(raised.value)
    assert says in str(raised.value)
