"""A task's first step taken at once (app.http.request_task): the coroutine runs as its task, in its
context, up to its first wait; the task then carries on from there as any other."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from typing import Any

import pytest

from app.http.request_task import start, take_first_step

seen: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="unset")


def from_the_loop(work: Callable[[], Any]) -> asyncio.Future[Any]:
    """Run `work` as the loop runs a protocol's callback (no task running); its result."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()

    def run() -> None:
        try:
            done.set_result(work())
        except BaseException as exc:
            done.set_exception(exc)

    loop.call_soon(run)
    return done


async def test_the_first_step_runs_at_once_as_its_task_and_the_task_goes_on_from_its_wait() -> None:
    loop = asyncio.get_running_loop()
    steps: list[str] = []
    wait: asyncio.Future[str] = loop.create_future()

    async def request() -> str:
        steps.append("first")
        seen.set("set in the first step")
        me = asyncio.current_task()
        answer = await wait
        steps.append("after the wait")
        assert asyncio.current_task() is me
        return f"{answer}, {seen.get()}"

    def start_and_step() -> tuple[asyncio.Task[str], bool, list[str], bool]:
        task = start(loop, request())
        taken = take_first_step(loop, task)
        return task, taken, list(steps), asyncio.current_task() is None

    task, taken, steps_at_once, no_task_after = await from_the_loop(start_and_step)
    assert taken and steps_at_once == ["first"]  # before the loop's next pass
    assert no_task_after  # the loop is left as it was: no task current outside the step
    await asyncio.sleep(0)
    assert steps == ["first"] and not task.done()  # the task's own first step did not rerun it
    wait.set_result("answered")
    assert await task == "answered, set in the first step"
    assert steps == ["first", "after the wait"]
    assert seen.get() == "unset"  # the step ran in the task's context, not the caller's


async def test_a_coroutine_that_ends_in_its_first_step_gives_the_task_its_outcome() -> None:
    loop = asyncio.get_running_loop()

    async def quick() -> int:
        return 7

    async def failing() -> None:
        raise ValueError("bad request")

    def start_both() -> tuple[asyncio.Task[Any], asyncio.Task[Any]]:
        tasks = []
        for coro in (quick(), failing()):
            task = start(loop, coro)
            assert take_first_step(loop, task)
            tasks.append(task)
        return tasks[0], tasks[1]

    quick_task, failing_task = await from_the_loop(start_both)
    assert await quick_task == 7
    with pytest.raises(ValueError, match="bad request"):
        await failing_task


async def test_a_task_cancelled_before_its_own_first_step_cancels_what_its_first_step_awaits() -> (
    None
):
    loop = asyncio.get_running_loop()
    wait: asyncio.Future[None] = loop.create_future()
    outcome: list[str] = []

    async def request() -> None:
        try:
            await wait
        except asyncio.CancelledError:
            outcome.append("cancelled at its wait")
            raise

    def start_step_cancel() -> asyncio.Task[None]:
        task = start(loop, request())
        take_first_step(loop, task)
        task.cancel()  # before the task itself has ever run
        return task

    task = await from_the_loop(start_step_cancel)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled() and outcome == ["cancelled at its wait"]
    assert wait.cancelled()  # whoever would have set it sees nobody waits


async def test_a_bare_yield_in_the_first_step_is_a_pass_and_then_it_goes_on() -> None:
    loop = asyncio.get_running_loop()

    async def request() -> str:
        await asyncio.sleep(0)
        return "after a pass"

    def start_and_step() -> asyncio.Task[str]:
        task = start(loop, request())
        assert take_first_step(loop, task)
        return task

    assert await (await from_the_loop(start_and_step)) == "after a pass"


async def test_inside_a_running_task_the_first_step_is_left_to_the_task() -> None:
    loop = asyncio.get_running_loop()
    ran: list[str] = []

    async def request() -> None:
        ran.append("ran")

    task = start(loop, request())
    assert not take_first_step(loop, task)  # this test is a task itself
    assert ran == []
    await task
    assert ran == ["ran"]
    assert not take_first_step(loop, task)  # and never twice
