"""FunctionTool schema derivation, tool execution and `load_tool_functions`."""

from __future__ import annotations

import asyncio
import threading
import time
import types

import pytest
from pydantic import ValidationError

from agent.tools.base import ToolLoadError
from agent.tools.builtin import text_stats
from agent.tools.function import FunctionTool, load_tool_functions
from agent.tools.toolbox import Toolbox
from stores.models import ToolCall

# --- schema derivation -----------------------------------------------------------------------


def search_docs(
    query: str,
    limit: int = 5,
    exact: bool = False,
    ratio: float = 0.5,
    tags: list[str] | None = None,
) -> str:
    """Search the documentation
    for a phrase.

    Longer explanation that is part of the summary too.

    Args:
        query: The phrase to look for.
        limit (int): How many results at most.
        exact: Match the phrase exactly.

    Returns:
        The matching passages.

    Raises:
        LookupError: Never, really.
    """
    return query


def test_name_and_description_come_from_the_function() -> None:
    tool = FunctionTool(search_docs)
    assert tool.name == "search_docs"
    assert tool.description == (
        "Search the documentation for a phrase. Longer explanation that is part of the summary too."
    )
    assert "Returns" not in tool.description
    assert "matching passages" not in tool.description
    assert "LookupError" not in tool.description


def test_parameters_schema_types_required_defaults_and_arg_descriptions() -> None:
    params = FunctionTool(search_docs).parameters
    assert params["type"] == "object"
    assert "title" not in params
    assert params["required"] == ["query"]
    props = params["properties"]
    assert list(props) == ["query", "limit", "exact", "ratio", "tags"]
    assert props["query"]["type"] == "string"
    assert props["limit"]["type"] == "integer"
    assert props["exact"]["type"] == "boolean"
    assert props["ratio"]["type"] == "number"
    tag_types = {alt.get("type") for alt in props["tags"]["anyOf"]}
    assert tag_types == {"array", "null"}
    array_alt = next(alt for alt in props["tags"]["anyOf"] if alt.get("type") == "array")
    assert array_alt["items"] == {"type": "string"}
    assert props["limit"]["default"] == 5
    assert props["exact"]["default"] is False
    assert props["query"]["description"] == "The phrase to look for."
    assert props["limit"]["description"] == "How many results at most."  # "(int)" stripped
    assert props["exact"]["description"] == "Match the phrase exactly."
    assert "description" not in props["ratio"]  # undocumented parameter
    assert params.get("additionalProperties") is False


def test_schema_is_an_openai_function_description() -> None:
    tool = FunctionTool(search_docs)
    assert tool.schema() == {
        "type": "function",
        "function": {
            "name": "search_docs",
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


def test_arg_descriptions_wrapped_over_several_lines_are_kept_whole() -> None:
    """Google style wraps a long argument description with a hanging indent."""

    def lookup(city: str, units: str = "metric") -> str:
        """Look up the weather.

        Args:
            city: The city to look up, spelled as in
                the local language.
            units: Either metric or imperial.
        """
        return city

    props = FunctionTool(lookup).parameters["properties"]
    assert props["city"]["description"] == "The city to look up, spelled as in the local language."
    assert props["units"]["description"] == "Either metric or imperial."


def test_no_parameters_gives_an_empty_object_schema() -> None:
    def now() -> str:
        """The time."""
        return "noon"

    params = FunctionTool(now).parameters
    assert params["type"] == "object"
    assert params.get("properties", {}) == {}
    assert "required" not in params or params["required"] == []


def test_validate_applies_defaults_and_rejects_bad_arguments() -> None:
    tool = FunctionTool(search_docs)
    assert tool.validate({"query": "x"}) == {
        "query": "x",
        "limit": 5,
        "exact": False,
        "ratio": 0.5,
        "tags": None,
    }
    with pytest.raises(ValidationError):
        tool.validate({})
    with pytest.raises(ValidationError):
        tool.validate({"query": "x", "limit": "many"})
    with pytest.raises(ValidationError):
        tool.validate({"query": "x", "unknown": 1})


# --- running tools ---------------------------------------------------------------------------


async def test_sync_tool_runs_in_a_worker_thread_without_blocking_the_loop() -> None:
    seen: dict[str, int] = {}

    def slow_sync(seconds: float) -> str:
        """Block for a while.

        Args:
            seconds: How long.
        """
        seen["thread"] = threading.get_ident()
        time.sleep(seconds)
        return "done"

    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    tick_task = asyncio.create_task(ticker())
    try:
        result = await FunctionTool(slow_sync)({"seconds": 0.2})
    finally:
        tick_task.cancel()
    assert result == "done"
    assert seen["thread"] != threading.get_ident()
    assert ticks >= 5, "the event loop was blocked while the sync tool ran"


async def test_async_tool_runs_on_the_event_loop() -> None:
    seen: dict[str, object] = {}

    async def fetch(key: str) -> str:
        """Fetch a key.

        Args:
            key: The key.
        """
        seen["thread"] = threading.get_ident()
        seen["loop"] = asyncio.get_running_loop()
        return key * 2

    assert await FunctionTool(fetch)({"key": "ab"}) == "abab"
    assert seen["thread"] == threading.get_ident()
    assert seen["loop"] is asyncio.get_running_loop()


async def test_toolbox_bounds_concurrency() -> None:
    running = 0
    peak = 0

    async def work(n: int) -> int:
        """Do some work.

        Args:
            n: Which.
        """
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.05)
        running -= 1
        return n

    toolbox = Toolbox([FunctionTool(work)], concurrency=2)
    calls = [ToolCall(id=f"c{i}", name="work", arguments=f'{{"n": {i}}}') for i in range(6)]
    results = await toolbox.run(calls)
    assert peak == 2
    assert [r.content for r in results] == ["0", "1", "2", "3", "4", "5"]
    assert [r.call_id for r in results] == [c.id for c in calls]
    assert all(r.ok for r in results)


async def test_toolbox_reports_start_and_finish_of_every_call() -> None:
    toolbox = Toolbox([FunctionTool(text_stats)])
    started: list[str] = []
    finished: list[tuple[str, bool]] = []
    calls = [
        ToolCall(id="a", name="text_stats", arguments='{"text": "one two"}'),
        ToolCall(id="b", name="nope", arguments="{}"),
    ]
    results = await toolbox.run(
        calls,
        on_start=lambda c: started.append(c.id),
        on_finish=lambda r: finished.append((r.call_id, r.ok)),
    )
    assert sorted(started) == ["a", "b"]
    assert sorted(finished) == [("a", True), ("b", False)]
    assert results[0].content == '{"words": 2, "characters": 7}'
    assert results[1].content.startswith("Error:") and "text_stats" in results[1].content


def test_toolbox_rejects_two_tools_with_one_name() -> None:
    with pytest.raises(ToolLoadError, match="text_stats"):
        Toolbox([FunctionTool(text_stats), FunctionTool(text_stats)])


# --- load_tool_functions ---------------------------------------------------------------------


def undocumented(x: int) -> int:
    return x


def unhinted(x) -> int:  # type: ignore[no-untyped-def]
    """Has no type hint on x."""
    return x


def variadic(*items: int) -> int:
    """Takes *args."""
    return len(items)


def dangling(x: NoSuchType) -> int:  # type: ignore[name-defined]  # noqa: F821
    """Its hint names a type that does not exist."""
    return 0


def good_one(x: int) -> int:
    """Return x.

    Args:
        x: A number.
    """
    return x


def good_two(y: str) -> str:
    """Return y.

    Args:
        y: A string.
    """
    return y


@pytest.fixture
def tool_module(monkeypatch: pytest.MonkeyPatch) -> str:
    """A module importable as `unit_tool_refs`, holding good and bad tool attributes."""
    module = types.ModuleType("unit_tool_refs")
    module.good_one = good_one
    module.good_two = good_two
    module.TOOLS = [good_one, good_two]
    module.TOOL_TUPLE = (good_two,)
    module.undocumented = undocumented
    module.unhinted = unhinted
    module.variadic = variadic
    module.dangling = dangling
    module.not_a_function = "just a string"
    module.MIXED = [good_one, undocumented]
    monkeypatch.setitem(__import__("sys").modules, "unit_tool_refs", module)
    return "unit_tool_refs"


def test_load_a_function_by_reference() -> None:
    (tool,) = load_tool_functions(["agent.tools.builtin:text_stats"])
    assert isinstance(tool, FunctionTool)
    assert tool.name == "text_stats"
    assert tool.function is text_stats


def test_load_a_list_by_reference() -> None:
    loaded = load_tool_functions(["agent.tools.builtin:BUILTIN_TOOLS"])
    assert [tool.name for tool in loaded] == ["text_stats"]


def test_load_several_references_in_order(tool_module: str) -> None:
    loaded = load_tool_functions(
        [f"{tool_module}:TOOLS", f"{tool_module}:TOOL_TUPLE", "agent.tools.builtin:text_stats"]
    )
    assert [tool.name for tool in loaded] == ["good_one", "good_two", "good_two", "text_stats"]


def test_load_nothing() -> None:
    assert load_tool_functions([]) == []


@pytest.mark.parametrize(
    "reference",
    ["agent.tools.builtin", "agent.tools.builtin:", ":text_stats", "", "text_stats"],
)
def test_malformed_reference_is_a_tool_load_error(reference: str) -> None:
    with pytest.raises(ToolLoadError, match="module:attribute"):
        load_tool_functions([reference])


@pytest.mark.parametrize(
    "reference",
    [
        "no_such_module_for_tests_xyz:tool",
        "agent.tools.builtin:no_such_tool",
        "agent.no_such_submodule:f",
    ],
)
def test_unresolvable_reference_is_a_tool_load_error_naming_it(reference: str) -> None:
    with pytest.raises(ToolLoadError) as caught:
        load_tool_functions([reference])
    assert reference in str(caught.value)


@pytest.mark.parametrize(
    ("attribute", "fragment"),
    [
        ("undocumented", "docstring"),
        ("unhinted", "type hint"),
        ("variadic", "*args"),
        ("dangling", "type hints"),
        ("not_a_function", "not a function"),
        ("MIXED", "docstring"),
    ],
)
def test_unusable_tool_is_a_tool_load_error(
    tool_module: str, attribute: str, fragment: str
) -> None:
    with pytest.raises(ToolLoadError) as caught:
        load_tool_functions([f"{tool_module}:{attribute}"])
    assert fragment in str(caught.value)


def test_tool_load_error_is_a_value_error() -> None:
    assert issubclass(ToolLoadError, ValueError)
