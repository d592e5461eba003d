"""A Part holds exactly one content: text, raw, url or data (data counts once given, even as
null, as a client's explicit `"data": null` does); the error names what it found."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from stores.models import Message, Part


@pytest.mark.parametrize(
    "fields",
    [{"text": "hi"}, {"raw": "aGk="}, {"url": "https://example.com/a"}, {"data": {"a": 1}}],
)
def test_one_content_is_a_part(fields: dict[str, object]) -> None:
    assert Part.model_validate(fields).model_dump(exclude_unset=True) == fields


def test_data_given_as_null_is_a_content() -> None:
    part = Part.model_validate({"data": None})
    assert "data" in part.model_fields_set


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({}, "none"),
        ({"mediaType": "text/plain"}, "none"),
        ({"text": "hi", "url": "https://example.com/a"}, "['text', 'url']"),
        ({"text": "hi", "data": None}, "['text', 'data']"),
        ({"raw": "aGk=", "url": "u", "data": 1}, "['raw', 'url', 'data']"),
    ],
)
def test_none_or_several_contents_are_refused_by_name(
    fields: dict[str, object], named: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        Part.model_validate(fields)
    assert f"exactly one of 'text', 'raw', 'url' or 'data' (got {named})" in str(refused.value)


def test_a_message_with_a_part_of_two_contents_is_refused() -> None:
    message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "a", "raw": "Yg=="}]}
    with pytest.raises(ValidationError, match=r"got \['text', 'raw'\]"):
        Message.model_validate(message)
