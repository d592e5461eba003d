"""Tools returning files and data: the client gets artifacts, the model a one-line description."""

from __future__ import annotations

import base64
import json

import pytest

from agent.tools.function import FunctionTool
from agent.tools.outputs import DataResult, FileResult, split_output
from agent.tools.toolbox import Toolbox
from stores.models import ToolCall

REPORT = b"%PDF" + b"x" * 12_000


def test_a_file_is_an_artifact_and_the_model_reads_a_description() -> None:
    content, [artifact] = split_output(
        FileResult(name="report.pdf", media_type="application/pdf", data=REPORT)
    )
    [part] = artifact.parts
    assert base64.b64decode(part.raw or "") == REPORT
    assert (part.filename, part.media_type) == ("report.pdf", "application/pdf")
    assert (
        content
        == f"file report.pdf (application/pdf, 12 KB) attached as artifact {artifact.artifact_id}"
    )


def test_text_and_data_mixed_keep_their_order() -> None:
    content, artifacts = split_output(["Here it is.", DataResult(name="totals", data={"sum": 3})])
    assert [a.parts[0].data for a in artifacts] == [{"sum": 3}]
    lines = content.splitlines()
    assert lines[0] == "Here it is."
    assert lines[1].startswith("data totals (10 characters of JSON) attached as artifact ")


def test_plain_values_are_untouched() -> None:
    assert split_output({"a": 1}) == ({"a": 1}, [])
    assert split_output("text") == ("text", [])


def test_a_file_needs_bytes_or_a_url_not_both() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        FileResult(name="x", data=b"1", url="https://example.com/x")
    with pytest.raises(ValueError, match="exactly one"):
        FileResult(name="x")


async def test_the_toolbox_hands_artifacts_on_and_the_bytes_never_reach_the_model() -> None:
    def make_report(title: str) -> FileResult:
        """Make a report.

        Args:
            title: Its title.
        """
        return FileResult(name=f"{title}.pdf", media_type="application/pdf", data=REPORT)

    toolbox = Toolbox([FunctionTool(make_report)])
    call = ToolCall(id="c1", name="make_report", arguments=json.dumps({"title": "q3"}))
    result = await toolbox.execute(call)
    assert result.ok and len(result.artifacts) == 1
    assert result.artifacts[0].parts[0].filename == "q3.pdf"
    assert "PDF" not in result.content and len(result.content) < 120
