"""The CLI's printer: the model's reasoning (thought parts of working updates) goes to stderr as
one run, dimmed on a terminal, never into the answer on stdout."""

from __future__ import annotations

import io

from app.client.a2a_client import Event
from app.client.printer import DIM, NORMAL, Printer, Turn


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def working(*parts: dict) -> Event:
    payload = {"status": {"state": "TASK_STATE_WORKING", "message": {"parts": list(parts)}}}
    return Event(kind="status", payload=payload, raw=payload)


def thought(text: str) -> dict:
    return {"text": text, "metadata": {"thought": True}}


def chunk(text: str, append: bool) -> Event:
    payload = {"artifact": {"artifactId": "a", "parts": [{"text": text}]}, "append": append}
    return Event(kind="artifact", payload=payload, raw=payload)


def play(err: io.StringIO) -> tuple[str, str]:
    out, turn = io.StringIO(), Turn()
    printer = Printer(raw=False, out=out, err=err)
    for event in (
        working(thought("Let me ")),
        working(thought("think.")),
        working({"text": "calling add"}),
        working(thought("Done.")),
        chunk("The answer", False),
        chunk(" is 3.", True),
    ):
        printer.event(event, turn)
    printer.end_line()
    return out.getvalue(), err.getvalue()


def test_thoughts_go_to_stderr_as_one_run_apart_from_progress_and_the_answer() -> None:
    out, err = play(io.StringIO())
    assert out == "The answer is 3.\n"
    assert err == "Let me think.\n· calling add\nDone.\n"


def test_on_a_terminal_thoughts_are_dimmed() -> None:
    _, err = play(Terminal())
    assert err == f"{DIM}Let me {NORMAL}{DIM}think.{NORMAL}\n· calling add\n{DIM}Done.{NORMAL}\n"
