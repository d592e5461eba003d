"""Tools the tests give the agent: plain functions, described by their hints and docstrings."""

from __future__ import annotations


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b
