"""The `a2a` command, as installed, against our server and the official a2a-sdk's: one-shot
commands through pipes, `a2a chat` in a pseudo-terminal (questions answered, Ctrl-C)."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.harness import ServerProcess
from tests.e2e.test_remote_foreign_agents import start_foreign
from tests.fakes.fake_llm import text, tool_calls

pytestmark = pytest.mark.timeout(120)

A2A = str(Path(sys.executable).with_name("a2a"))
SERVER_ENV = {"AGENT_TOOLS": "tests.e2e.tools_module:add"}


def a2a(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [A2A, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


class Terminal:
    """`a2a` in a pseudo-terminal: what a person types, and what they see."""

    def __init__(self, *args: str) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the terminal is its controlling tty
            os.execv(A2A, [A2A, *args])
        self.seen = ""

    def expect(self, wanted: str, timeout: float = 30.0) -> str:
        """Read until `wanted` shows; returns what came before it (and it)."""
        deadline = time.monotonic() + timeout
        while wanted not in self.seen:
            left = deadline - time.monotonic()
            assert left > 0, f"{wanted!r} never showed; the terminal shows:\n{self.seen}"
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.fd, 4096).decode(errors="replace")
                except OSError:  # the child is gone
                    chunk = ""
                assert chunk, f"the terminal closed before {wanted!r}:\n{self.seen}"
                self.seen += chunk.replace("\r\n", "\n")
        head, _, self.seen = self.seen.partition(wanted)
        return head + wanted

    def type(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    def exit_code(self, timeout: float = 20.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.05)
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError(f"a2a did not exit; the terminal shows:\n{self.seen}")


def test_card_and_send_stream_the_answer(server, fake_llm, marker):
    card = json.loads(a2a("card", server.url, "--json").stdout)
    assert card["name"] and card["supportedInterfaces"]
    fake_llm.script(
        tool_calls([("add", {"a": 2, "b": 3})], when_user_contains=marker),
        text(["It is ", "5."], when_user_contains=marker),
    )
    done = a2a("send", server.url, f"add {marker}")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "It is 5.\n"
    assert "· calling add" in done.stderr and "· add finished" in done.stderr


def test_agents_of_a_server_of_one_agent_is_its_card(server):
    """Without an agents file, the server lists its one agent: the root card's."""
    card = json.loads(a2a("card", server.url, "--json").stdout)
    card_url = f"{server.url}/.well-known/agent-card.json"
    listed = a2a("agents", server.url)
    assert (listed.returncode, listed.stderr) == (0, ""), listed.stderr
    assert listed.stdout == f"{card['name']}  {card_url}  {card['description']}\n"
    as_json = a2a("agents", server.url, "--json")
    assert [json.loads(line) for line in as_json.stdout.splitlines()] == [
        {"name": card["name"], "description": card["description"], "url": card_url}
    ]


def test_json_prints_one_event_per_line(server, fake_llm, marker):
    fake_llm.script(text(["a", "b", "c"], when_user_contains=marker))
    done = a2a("send", server.url, f"json {marker}", "--json")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert "task" in events[0]
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    chunks = [
        e["artifactUpdate"]["artifact"]["parts"][0]["text"] for e in events if "artifactUpdate" in e
    ]
    assert "".join(chunks) == "abc"


def test_a_question_ends_send_with_how_to_answer_it(server, fake_llm, marker):
    fake_llm.script(
        tool_calls([("ask_user", {"question": "Which city?"})], when_user_contains=marker),
        text("Sunny in Paris.", when_user_contains=marker),
    )
    asked = a2a("send", server.url, f"weather {marker}")
    assert asked.returncode == 3, asked.stderr
    assert "? Which city?" in asked.stderr
    hint = asked.stderr.strip().splitlines()[-1]
    command = hint.split(": ", 1)[1].split()  # a2a send URL ANSWER --task T --context C
    task_id = command[command.index("--task") + 1]
    context_id = command[command.index("--context") + 1]
    answered = a2a("send", server.url, "Paris", "--task", task_id, "--context", context_id)
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout == "Sunny in Paris.\n"
    got = json.loads(a2a("get", server.url, task_id, "--json").stdout)
    assert got["status"]["state"] == "TASK_STATE_COMPLETED"
    listed = a2a("tasks", server.url, "--context", context_id)
    assert task_id in listed.stdout and "TASK_STATE_COMPLETED" in listed.stdout


def test_subscribe_resumes_after_the_last_event_id(server, fake_llm, marker):
    fake_llm.script(text(["x", "y"], when_user_contains=marker))
    events = a2a("send", server.url, f"sub {marker}", "--json").stdout.splitlines()
    task_id = json.loads(events[0])["task"]["id"]
    resumed = a2a("subscribe", server.url, task_id, "--last-event-id", "2", "--json")
    assert resumed.returncode == 0, resumed.stderr
    again = [json.loads(line) for line in resumed.stdout.splitlines()]
    assert again == [json.loads(line) for line in events[2:]]


def test_chat_answers_a_question_and_ctrl_c_cancels_a_turn(server, rpc, fake_llm, marker):
    fake_llm.script(
        text("Hello!", when_user_contains=f"hi {marker}"),
        tool_calls([("ask_user", {"question": "Which city?"})], when_user_contains=f"w {marker}"),
        text("Sunny in Oslo.", when_user_contains=f"w {marker}"),
        text("too late", delay=30, when_user_contains=f"slow {marker}"),
    )
    term = Terminal("chat", server.url)
    term.expect("> ")
    term.type(f"hi {marker}\n")
    assert "Hello!" in term.expect("> ")
    term.type(f"w {marker}\n")
    term.expect("? Which city?")
    term.expect("answer> ")
    term.type("Oslo\n")
    assert "Sunny in Oslo." in term.expect("> ")
    term.type(f"slow {marker}\n")
    fake_llm.wait_for_requests(f"slow {marker}", 1, timeout=15)
    term.type("\x03")  # Ctrl-C, through the terminal
    canceled = term.expect("canceled task ")
    task_id = term.expect("\n").strip()
    assert canceled and rpc.get_task(task_id)["status"]["state"] == "TASK_STATE_CANCELED"
    term.expect("> ")
    term.type("\x04")  # Ctrl-D leaves
    assert term.exit_code() == 0


def test_what_goes_wrong_is_one_line_and_a_non_zero_exit(fake_llm, marker):
    locked = ServerProcess(fake_llm.base_url, env={"A2A_API_KEYS": "alice:key-0123456789abcdef"})
    locked.start()
    try:
        refused = a2a("send", locked.url, "hi")
        assert refused.returncode == 1
        assert refused.stderr.count("\n") == 1 and "401" in refused.stderr, refused.stderr
        fake_llm.script(text("in", when_user_contains=marker))
        allowed = a2a(
            "send", locked.url, f"key {marker}", env={"A2A_API_KEY": "key-0123456789abcdef"}
        )
        assert (allowed.returncode, allowed.stdout) == (0, "in\n"), allowed.stderr

        not_an_agent = a2a("card", fake_llm.base_url)
        assert not_an_agent.returncode == 1
        assert not_an_agent.stderr.count("\n") == 1
        assert "is not an A2A agent card" in not_an_agent.stderr

        fake_llm.script(text("never", delay=30, when_user_contains=f"drop {marker}"))
        sending = subprocess.Popen(
            [A2A, "send", locked.url, f"drop {marker}", "--api-key", "key-0123456789abcdef"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        fake_llm.wait_for_requests(f"drop {marker}", 1, timeout=15)
        locked.proc.kill()  # the server drops the stream
        _, err = sending.communicate(timeout=30)
        assert sending.returncode == 1 and err.count("\n") == 1, err
        assert err.startswith("error: "), err
    finally:
        locked.cleanup()


@pytest.mark.parametrize("generation", ["1.0", "0.3"])
def test_the_official_sdks_server_as_a_foreign_agent(generation):
    process, card_url = start_foreign(generation)
    try:
        done = a2a("send", card_url, "hello there")
        assert done.returncode == 0, done.stderr
        assert done.stdout == "echo: hello there\n"
        assert f"· {generation} is on it" in done.stderr
        asked = a2a("send", card_url, "weather in a city")
        assert asked.returncode == 3 and "? Which city?" in asked.stderr, asked.stderr
        # A server without an agent list (/agents is 404) is one agent: its card's.
        listed = a2a("agents", card_url, "--json")
        (agent,) = map(json.loads, listed.stdout.splitlines())
        assert agent["url"] == card_url and agent["name"]
        assert listed.stderr == f"{card_url} serves one agent (it has no /agents list)\n"
    finally:
        process.kill()
        process.wait()
