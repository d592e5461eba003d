"""A2A 1.1 task generations on the client side: whether the card offers 1.1 for the interface
chosen, and a stream's generations watched for a gap (a missed event: the task is re-read).

A generation is a decimal string on the wire (ProtoJSON `int64`), a number from some servers;
0, a repeat or a step back means the server does not implement generations (spec section 3.2.7):
the watcher then stops judging the stream.
"""

from __future__ import annotations

from typing import Any

from app.client.endpoints import Endpoint

V11 = "1.1"


def offers_v11(card: dict[str, Any], endpoint: Endpoint) -> bool:
    """Whether the card lists a 1.1 interface for the endpoint's binding and URL (our server
    lists them to a client that fetched the card asking for 1.1)."""
    if endpoint.generation != "1.0" or endpoint.binding == "GRPC":
        return False
    for interface in card.get("supportedInterfaces") or []:
        major, _, minor = str(interface.get("protocolVersion", "")).partition(".")
        if (
            major == "1"
            and minor.isdigit()
            and int(minor) >= 1
            and interface.get("protocolBinding") == endpoint.binding
            and str(interface.get("url", "")).rstrip("/") == endpoint.url.rstrip("/")
        ):
            return True
    return False


def generation_of(payload: dict[str, Any]) -> int | None:
    """A task's or event's generation, or None when it carries none (or not a number)."""
    value = payload.get("generation")
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


class GapWatcher:
    """The generations of one stream: `missed` says whether events were skipped before this
    one (the client should re-read the task)."""

    __slots__ = ("_last", "trusted")

    def __init__(self) -> None:
        self._last: int | None = None
        self.trusted = True

    def missed(self, payload: dict[str, Any]) -> bool:
        generation = generation_of(payload)
        if not self.trusted or generation is None:
            return False
        if generation == 0 or (self._last is not None and generation <= self._last):
            self.trusted = False  # no generations here (or not implemented as the spec says)
            return False
        gap = self._last is not None and generation > self._last + 1
        self._last = generation
        return gap
