"""`a2a-server` raises its soft limit on open files to what A2A_MAX_CONNECTIONS needs (a soft
limit of 1024, a common default, refused connections long before the configured limit)."""

from __future__ import annotations

import logging
import resource
from collections.abc import Iterator

import pytest

from app.http.connections import SPARE_DESCRIPTORS, raise_open_files_limit


@pytest.fixture
def soft_limit_of_1024() -> Iterator[int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4096:
        pytest.skip(f"the hard limit ({hard}) leaves nothing to raise to")
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    try:
        yield hard
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_soft_limit_is_raised_to_what_the_connections_need(
    soft_limit_of_1024: int, caplog: pytest.LogCaptureFixture
) -> None:
    raise_open_files_limit(2000)
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (
        2000 + SPARE_DESCRIPTORS,
        soft_limit_of_1024,
    )
    assert not caplog.records
    raise_open_files_limit(100)  # never lowered
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == 2000 + SPARE_DESCRIPTORS


def test_a_hard_limit_too_low_is_reached_and_named(
    soft_limit_of_1024: int, caplog: pytest.LogCaptureFixture
) -> None:
    hard = soft_limit_of_1024
    if hard == resource.RLIM_INFINITY:
        pytest.skip("no hard limit to reach")
    with caplog.at_level(logging.WARNING, logger="app.http.connections"):
        raise_open_files_limit(hard + 1000)
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
    assert "lower A2A_MAX_CONNECTIONS" in caplog.text
    assert f"allows about {hard - SPARE_DESCRIPTORS} connections" in caplog.text


def test_a_limit_the_system_refuses_to_raise_is_kept_and_named(
    soft_limit_of_1024: int, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(resource_id: int, limits: tuple[int, int]) -> None:
        raise ValueError("current limit exceeds maximum limit")  # as macOS says past its cap

    with monkeypatch.context() as patched, caplog.at_level(logging.WARNING, "app.http.connections"):
        patched.setattr(resource, "setrlimit", refuse)
        raise_open_files_limit(2000)  # the server still starts
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == 1024
    assert "allows about 768 connections" in caplog.text
