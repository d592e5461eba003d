"""Random ids: version 4 UUIDs as text, what `str(uuid.uuid4())` makes, for less.

The random bytes come from the OS 4 KiB at a time: one system call per 256 ids, not one per id
(a turn draws several: its task, context, messages, artifact). Each thread has a stream of its
own, and a forked child starts a new one (it must not hand out its parent's next ids).
"""

from __future__ import annotations

import itertools
import os
import threading
import uuid
from collections.abc import Iterator

_BLOCK_BYTES = 4096
# The variant bits (10xx) of the UUID's 17th hex digit, kept from the random digit's low bits.
_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}


def _ids() -> Iterator[str]:
    while True:
        block = os.urandom(_BLOCK_BYTES).hex()
        for start in range(0, len(block), 32):
            h = block[start : start + 32]
            yield f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:]}"


class _PerThread(threading.local):
    def __init__(self) -> None:
        self.ids = _ids()


_streams = _PerThread()


def _start_over() -> None:
    global _streams
    _streams = _PerThread()


os.register_at_fork(after_in_child=_start_over)


def new_id() -> str:
    """A new random id (a version 4 UUID, as text)."""
    return next(_streams.ids)


# Unique across processes (a random prefix) and cheap (a counter): one is drawn per journal
# write, and uuid4's system call per write showed in the profile.
_EVENT_ID_PREFIX = uuid.uuid4().hex
_EVENT_IDS = (f"{_EVENT_ID_PREFIX}-{n}" for n in itertools.count())


def new_event_id() -> str:
    """An id for one journal write (`JournalWrite.event_id`): the same for each of its retries."""
    return next(_EVENT_IDS)
