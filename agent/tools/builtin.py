"""Tools that ship with the server; the offline demo model uses them."""

from __future__ import annotations


def text_stats(text: str) -> dict[str, int]:
    """Count the words and characters of a text.

    Args:
        text: The text to measure.
    """
    return {"words": len(text.split()), "characters": len(text)}


BUILTIN_TOOLS = [text_stats]
