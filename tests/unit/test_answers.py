"""read_answer: what a client's message means for the question a suspended task asks."""

from __future__ import annotations

import pytest

from agent.runtime.answers import Answer, AnswerRejected, read_answer
from agent.state import Awaiting
from stores.models import Message, Part, Role, ToolCall

APPROVAL = Awaiting(
    kind="approval", call=ToolCall(id="d1", name="danger", arguments='{"target": "db"}')
)
QUESTION = Awaiting(
    kind="ask_user",
    call=ToolCall(id="q1", name="ask_user", arguments='{"question": "Which city?"}'),
    question="Which city?",
)


def message(*parts: Part) -> Message:
    return Message(message_id="m1", role=Role.USER, parts=list(parts))


def texts(*values: str) -> Message:
    return message(*(Part(text=value) for value in values))


def data(value) -> Message:
    return message(Part(data=value))


@pytest.mark.parametrize(
    ("answer", "approved"),
    [
        ("approve", True),
        ("APPROVE ", True),
        ("  Approve\n", True),
        ("deny", False),
        ("Deny", False),
        (" DENY ", False),
    ],
)
def test_approval_text_answers(answer: str, approved: bool) -> None:
    assert read_answer(APPROVAL, texts(answer)) == Answer(approved=approved)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"approved": True}, Answer(approved=True)),
        ({"approved": False}, Answer(approved=False)),
        ({"approved": False, "reason": "too risky"}, Answer(approved=False, reason="too risky")),
        ({"approved": True, "reason": None}, Answer(approved=True)),
        ({"approved": True, "reason": "fine", "extra": 1}, Answer(approved=True, reason="fine")),
    ],
)
def test_approval_data_answers(value: dict, expected: Answer) -> None:
    assert read_answer(APPROVAL, data(value)) == expected


@pytest.mark.parametrize("value", ["true", "yes", 1, 0, None, [True], {"x": True}])
def test_approval_data_with_a_non_bool_approved_is_rejected(value) -> None:
    with pytest.raises(AnswerRejected) as raised:
        read_answer(APPROVAL, data({"approved": value}))
    assert "approved" in str(raised.value)


@pytest.mark.parametrize(
    "answer",
    ["yes", "ok", "approved", "approve please", "I deny", "", "   ", "approve.", "no"],
)
def test_unrelated_text_is_rejected_naming_the_call(answer: str) -> None:
    with pytest.raises(AnswerRejected) as raised:
        read_answer(APPROVAL, texts(answer))
    assert "'danger'" in str(raised.value)
    assert "approve" in str(raised.value) and "deny" in str(raised.value)


@pytest.mark.parametrize(
    "value", [{"decision": "approve"}, ["approve"], "approve", None, {"Approved": True}]
)
def test_data_without_an_approved_key_is_rejected(value) -> None:
    with pytest.raises(AnswerRejected):
        read_answer(APPROVAL, data(value))


def test_file_parts_do_not_answer() -> None:
    with pytest.raises(AnswerRejected):
        read_answer(APPROVAL, message(Part(url="https://example.invalid/approve.txt")))


def test_the_first_part_that_answers_decides() -> None:
    assert read_answer(APPROVAL, texts("Hi!", "deny", "approve")) == Answer(approved=False)
    mixed = message(Part(text="noise"), Part(data={"approved": True, "reason": "r"}))
    assert read_answer(APPROVAL, mixed) == Answer(approved=True, reason="r")


@pytest.mark.parametrize(
    ("msg", "expected"),
    [
        (texts("Paris"), "Paris"),
        (texts("  Paris  "), "  Paris  "),
        (texts("line one", "line two"), "line one\nline two"),
        (texts("approve"), "approve"),
        (data({"city": "Paris"}), '{"city": "Paris"}'),
    ],
)
def test_ask_user_answer_is_the_message_text(msg: Message, expected: str) -> None:
    assert read_answer(QUESTION, msg) == Answer(text=expected)
