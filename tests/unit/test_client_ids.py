"""app.a2a.operations.check_id: the rule for client-chosen ids (the e2e tests cover the wire)."""

from __future__ import annotations

import pytest

from app.a2a.params import MAX_ID_LENGTH, check_id
from app.errors import InvalidParamsError


@pytest.mark.parametrize(
    "value",
    ["m-1", "a b", "~!@#$%^&*()", "é漢字🙂", "id-é", "x" * MAX_ID_LENGTH],
)
def test_printable_ids_pass(value: str) -> None:
    check_id("message.messageId", value)


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("m\x01id", "control or format"),  # Cc, ASCII
        ("m\x7fid", "control or format"),  # DEL, Cc
        ("tab\there", "control or format"),
        ("m\u200bid", "control or format"),  # zero-width space, Cf
        ("é\u2028", "control or format"),  # line separator, Zl
        ("a\u2029b", "control or format"),  # paragraph separator, Zp
        ("\x85é", "control or format"),  # NEL, a C1 control
        ("   ", "empty or blank"),
        ("x" * (MAX_ID_LENGTH + 1), "longer than"),
    ],
)
def test_other_ids_are_refused_naming_the_field(value: str, why: str) -> None:
    with pytest.raises(InvalidParamsError) as raised:
        check_id("message.messageId", value)
    assert raised.value.message.startswith("message.messageId") and why in raised.value.message
    assert raised.value.metadata == {"field": "message.messageId"}
