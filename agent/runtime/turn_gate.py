"""TurnGate (`A2A_TURN_SLICE_MS`): turns take a slice of each event-loop pass, and new requests
are not queued behind them.

The event loop runs, in one pass, every callback that was ready when the pass began, then polls
the sockets. A turn whose model streams without waiting (a local model, a cached answer, the
scripted one) runs start to end in one step, so on a saturated replica a pass holds many whole
turns, and a request that arrives meanwhile waits in its socket for all of them before it is
even read.

With a slice, turns share a budget of `slice_s` of loop time per pass (counted from the pass's
first turn step). A turn about to start once the budget is spent waits, first come first served,
and is let go at a later pass; a turn that has run RUNNING_TURN_SLICES in one pass goes to the
back of the queue. Between passes the loop polls, and new requests are read and answered (a
stream's first event, a refusal) before the queued turns go on. A turn that waits for its model
(every remote one) seldom meets the gate: its steps are short, and its waits let the loop poll.

A blocking send's turn never waits here: its client waits for the turn's end, so holding it
back only lengthens that wait. The slice trades a stream's first event against events per second;
what each slice bought at 32 streams is in bench/RESULTS.md ("The turn gate", "Run P").
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

# A turn already under way yields only after this many slices in one pass: splitting a turn's
# events across passes costs a write per pass on its stream.
TURN_SLICE_S = 0.002
"""Loop time per pass the turns share unless configured (A2A_TURN_SLICE_MS)."""
RUNNING_TURN_SLICES = 4


class TurnGate:
    def __init__(self, slice_s: float) -> None:
        self._slice_s = slice_s  # 0: no gate
        self._pass_began = 0.0  # 0: no turn has stepped in this pass yet
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._let_go = 0  # waiters let go that have not resumed yet: newcomers queue behind them
        # Turns let go per pass; grows while turns wait, shrinks when one let go found the slice
        # already spent (it goes back to the front).
        self._batch = 1

    def spent(self, slices: float = 1.0) -> bool:
        """Whether turns have used `slices` of this pass's budget."""
        if not self._slice_s:
            return False
        now = time.perf_counter()
        if not self._pass_began:
            self._pass_began = now
            asyncio.get_running_loop().call_soon(self._new_pass)
            return False
        return now - self._pass_began > self._slice_s * slices

    async def admit(self) -> bool:
        """Return when the turn may run: at once if the budget allows and no turn waits. True
        if it waited for a later pass."""
        if not self._slice_s or (not self._waiting and not self._let_go and not self.spent()):
            return False
        loop = asyncio.get_running_loop()
        at_front = False
        while True:
            waiter: asyncio.Future[None] = loop.create_future()
            if at_front:
                self._waiting.appendleft(waiter)
            else:
                self._waiting.append(waiter)
            if len(self._waiting) == 1:  # else a release is due already (see `_release`)
                loop.call_soon(self._release)
            try:
                await waiter
            finally:
                if waiter.done() and not waiter.cancelled():  # it had been let go
                    self._let_go -= 1
            if not self.spent():
                return True
            self._batch = max(1, self._batch - 1)
            at_front = True

    def overrun(self) -> bool:
        """For a turn under way: whether it should `admit` again (to the back of the queue),
        having run RUNNING_TURN_SLICES in this pass."""
        return self.spent(RUNNING_TURN_SLICES)

    @property
    def slice_s(self) -> float:
        return self._slice_s

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def _release(self) -> None:
        """Once a pass while turns wait (so one is due whenever the queue is not empty): a new
        budget, and the next `_batch` of them let go."""
        self._new_pass()
        for _ in range(min(self._batch, len(self._waiting))):
            waiter = self._waiting.popleft()
            if not waiter.done():  # else cancelled while waiting
                waiter.set_result(None)
                self._let_go += 1
        if self._waiting:
            self._batch += 1
            asyncio.get_running_loop().call_soon(self._release)

    def _new_pass(self) -> None:
        self._pass_began = 0.0  # the next turn step starts this pass's budget
