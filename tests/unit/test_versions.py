"""A2A-Version negotiation: which generation a header asks for, and what a method refuses."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from app.a2a.versions import check_version, generation_of, requested_generation
from app.errors import VersionNotSupportedError


def _request(header: str | None = None, query: bytes = b"") -> Request:
    headers = [(b"a2a-version", header.encode())] if header is not None else []
    return Request(
        {"type": "http", "method": "POST", "path": "/", "headers": headers, "query_string": query}
    )


@pytest.mark.parametrize(
    ("version", "generation"),
    [
        ("1.0", "1.0"),
        ("1.2", "1.0"),
        (" 1 ", "1.0"),
        ("0.3", "0.3"),
        ("0.3.1", "0.3"),
        ("0.2", None),
        ("2.0", None),
        ("", None),
        ("latest", None),
    ],
)
def test_a_version_is_served_as_its_generation_or_not_at_all(
    version: str, generation: str | None
) -> None:
    assert requested_generation(version) == generation


def test_the_method_name_says_its_generation() -> None:
    assert generation_of("SendMessage") == "1.0"
    assert generation_of("message/send") == "0.3"


def test_no_header_is_the_methods_own_generation() -> None:
    check_version(_request(), "1.0")
    check_version(_request(), "0.3")
    check_version(_request("1.1"), "1.0")
    check_version(_request(query=b"A2A-Version=0.3"), "0.3")


def test_another_generation_or_an_unknown_version_is_32009_naming_it() -> None:
    with pytest.raises(VersionNotSupportedError, match=r"this method is A2A 0\.3") as caught:
        check_version(_request("1.0"), "0.3")
    assert caught.value.code == -32009
    assert caught.value.metadata == {"requestedVersion": "1.0"}
    with pytest.raises(VersionNotSupportedError, match=r"speaks 1\.0 and 0\.3"):
        check_version(_request(query=b"A2A-Version=9"), "1.0")
