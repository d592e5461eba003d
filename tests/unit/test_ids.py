"""`new_id`: version 4 UUIDs as text, unique across threads and across a fork."""

from __future__ import annotations

import os
import threading
import uuid

from stores.ids import new_id


def test_ids_are_version_4_uuids_as_uuid4_writes_them() -> None:
    for _ in range(1000):  # several 4 KiB blocks of random bytes
        text = new_id()
        parsed = uuid.UUID(text)
        assert (parsed.version, parsed.variant) == (4, uuid.RFC_4122)
        assert str(parsed) == text


def test_ids_do_not_repeat_within_or_across_threads() -> None:
    drawn: list[list[str]] = [[] for _ in range(4)]

    def draw(into: list[str]) -> None:
        into.extend(new_id() for _ in range(5000))

    threads = [threading.Thread(target=draw, args=(into,)) for into in drawn]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everything = [text for into in drawn for text in into] + [new_id() for _ in range(5000)]
    assert len(set(everything)) == len(everything) == 25_000


def test_a_forked_child_does_not_hand_out_its_parents_next_ids() -> None:
    new_id()  # the parent's stream has a block under way
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child)
        os.write(write_end, "\n".join(new_id() for _ in range(10)).encode())
        os._exit(0)
    os.close(write_end)
    os.waitpid(child, 0)
    with os.fdopen(read_end) as pipe:
        childs = set(pipe.read().split("\n"))
    parents = {new_id() for _ in range(10)}
    assert len(childs) == 10 and not childs & parents
