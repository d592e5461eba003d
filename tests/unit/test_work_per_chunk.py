"""The work a streamed chunk costs, counted (not timed, so it holds on a loaded machine): one
store call and no copy of the whole task per chunk, whatever the answer's length. A return of
the quadratic copy (the task copied at every publish, growing with the answer) fails here."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from pydantic import BaseModel

from agent.scripted_model import ScriptedModel
from stores.memory import InMemoryTaskStore

from .engine_helpers import Stores, make_loop

SHORT, LONG = 20, 220


async def work_of_a_turn(chunks: int, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Model copies (by class) and store publishes of one streamed turn of `chunks` chunks,
    read to its end by one reader."""
    counts: Counter[str] = Counter()
    model_copy, publish = BaseModel.model_copy, InMemoryTaskStore.publish

    def counting_copy(self: BaseModel, *args: Any, **kwargs: Any) -> BaseModel:
        counts[f"copy {type(self).__name__}"] += 1
        counts["copies"] += 1
        return model_copy(self, *args, **kwargs)

    async def counting_publish(self: InMemoryTaskStore, *args: Any, **kwargs: Any) -> int:
        counts["publishes"] += 1
        return await publish(self, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(BaseModel, "model_copy", counting_copy)
        patch.setattr(InMemoryTaskStore, "publish", counting_publish)
        stores = Stores()
        runner = stores.runner(make_loop(ScriptedModel(chunks=chunks)), holder="process-1")  # type: ignore[arg-type]
        try:
            task = await stores.submit(runner)
            await stores.journal_until_end(task.id)
        finally:
            await runner.shutdown()
    return counts


async def test_a_chunk_costs_one_publish_and_no_task_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    short = await work_of_a_turn(SHORT, monkeypatch)
    long = await work_of_a_turn(LONG, monkeypatch)
    extra_chunks = LONG - SHORT
    assert long["publishes"] - short["publishes"] == extra_chunks, (short, long)
    assert long["copy Task"] == short["copy Task"], "the whole task is copied per chunk"
    # A chunk's event is copied into the journal and out to its reader: two small copies.
    assert long["copies"] - short["copies"] <= 2 * extra_chunks, (short, long)
