"""One server per file: a second one (another process) is refused with one line; a server killed
outright (-9) right after a committed write leaves it in the file and the file free."""

from __future__ import annotations

import signal
import textwrap

import pytest

from stores.base import JournalWrite
from stores.errors import StoreLocked
from stores.models import ChatMessage
from stores.sqlite.factory import create_sqlite_stores
from tests.unit.test_store_contract import chunk_event, make_task

from .processes import python

pytestmark = pytest.mark.sqlite

OPEN_AND_REPORT = textwrap.dedent(
    """
    import sys
    from stores.errors import StoreLocked
    from stores.sqlite.factory import create_sqlite_stores
    try:
        create_sqlite_stores(sys.argv[1])
    except StoreLocked as exc:
        print(f"locked: {exc}")
        sys.exit(2)
    print("opened")
    """
)


def _run(script: str, *args: str) -> tuple[int, str, str]:
    process = python(script, *args)
    out, err = process.communicate(timeout=60)
    return process.returncode, out.strip(), err


async def test_a_second_server_on_the_file_is_refused_with_one_line(db_path: str) -> None:
    stores = create_sqlite_stores(db_path)
    try:
        code, out, err = _run(OPEN_AND_REPORT, db_path)
        assert (code, out) == (
            2,
            f"locked: {db_path} is used by another a2a-server (SQLite serves one server;"
            " replicas need PostgreSQL or Redis)",
        ), err
        with pytest.raises(StoreLocked):  # in this process too (another open of the file)
            create_sqlite_stores(db_path)
    finally:
        await stores.aclose()
    code, out, err = _run(OPEN_AND_REPORT, db_path)
    assert (code, out) == (0, "opened"), f"aclose kept the file locked: {err}"


WRITE_THEN_WAIT = textwrap.dedent(
    """
    import asyncio, sys, time
    from stores.base import JournalWrite
    from stores.models import ChatMessage
    from stores.sqlite.factory import create_sqlite_stores
    from tests.unit.test_store_contract import chunk_event, make_task

    async def main():
        stores = create_sqlite_stores(sys.argv[1])
        task = make_task(sys.argv[2])
        await stores.tasks.create(task, owner="alice")
        await stores.tasks.publish(task.id, JournalWrite(chunk_event(task, "kept")), owner="alice")
        message = ChatMessage(role="user", content="kept too")
        await stores.messages.append("ctx-a", [message], owner="alice", unit_id="u1")
        print("written", flush=True)
        time.sleep(600)  # killed here: no aclose, no clean shutdown of anything

    asyncio.run(main())
    """
)


async def test_a_write_committed_before_a_kill_9_is_in_the_file(db_path: str) -> None:
    process = python(WRITE_THEN_WAIT, db_path, "t-crash")
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        assert line == "written", process.stderr.read() if process.stderr else ""
        process.send_signal(signal.SIGKILL)
        assert process.wait(timeout=30) == -signal.SIGKILL
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()
    stores = create_sqlite_stores(db_path)  # the dead process's lock went with it
    try:
        record = await stores.tasks.get("t-crash", owner="alice")
        assert record is not None and record.task == make_task("t-crash")
        entries = await stores.tasks.read("t-crash", owner="alice", after=0, timeout_s=0)
        assert [entry.position for entry in entries] == [1, 2]
        assert entries[1].event == chunk_event(record.task, "kept")
        window = await stores.messages.window("ctx-a", owner="alice", limit=10)
        assert window == [ChatMessage(role="user", content="kept too")]
        # And the file goes on: the next write takes the next position.
        write = JournalWrite(chunk_event(record.task, "after"))
        assert await stores.tasks.publish("t-crash", write, owner="alice") == 3
    finally:
        await stores.aclose()
