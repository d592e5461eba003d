"""AnswerStream: a turn's answer as it streams, chunk by chunk, into the task's journal.

    TextDelta text --> held back (one chunk of lookahead, so the last can say lastChunk)
                   --> rendered once in its stored form (`ArtifactChunks`)
                   --> the task store's ChunkSink (in memory: written at once; Redis: behind
                       the turn, in batches), in the order sent

The turn's other writes take the chunks no write has taken yet (`take`) and wait for the rest
(`written`), so the journal holds the turn's events in the order it made them.
"""

from __future__ import annotations

from stores.chunks import ChunkSink
from stores.codec import ArtifactChunks

ANSWER_ARTIFACT_NAME = "answer"


class AnswerStream:
    """The answer artifact a turn streams: its id, the chunks sent so far, the one held back."""

    __slots__ = ("_form", "_sink", "_task_ids", "artifact_id", "chunks_sent", "held")

    def __init__(
        self,
        sink: ChunkSink,
        *,
        task_id: str,
        context_id: str,
        artifact_id: str,
        chunks_sent: int = 0,
        held: str | None = None,
    ) -> None:
        self._sink = sink
        self._task_ids = (task_id, context_id)
        self.artifact_id = artifact_id
        self.chunks_sent = chunks_sent  # a resumed turn goes on counting from its checkpoint
        self.held = held  # one chunk of lookahead, so the last one can say lastChunk
        self._form: ArtifactChunks | None = None  # the chunks' stored form, once streaming

    @property
    def started(self) -> bool:
        """Whether any answer text was sent or is held back."""
        return bool(self.chunks_sent or self.held)

    async def text(self, text: str) -> None:
        """A chunk of the answer: the one held back goes, this one is held."""
        if self.held is not None:
            await self._send(self.held, last=False)
        self.held = text

    async def flush(self) -> None:
        """Send the chunk held back (the turn's next event is not the answer's end)."""
        if self.held is not None:
            await self._send(self.held, last=False)
            self.held = None

    async def finish(self) -> None:
        """Send the answer's last chunk: the one held back, or an empty one."""
        held, self.held = self.held, None
        await self._send(held or "", last=True)

    def take(self) -> list[bytes]:
        """The chunks no write has taken yet: they go in the caller's write, before its event."""
        return self._sink.take()

    async def written(self) -> None:
        """Wait until every chunk sent is in the journal; raises what writing them raised."""
        await self._sink.written()

    async def stop(self) -> None:
        """The turn stopped without ending: what is not written yet is left (see ChunkSink)."""
        await self._sink.stop()

    async def _send(self, text: str, *, last: bool) -> None:
        form = self._form
        if form is None:
            task_id, context_id = self._task_ids
            form = self._form = ArtifactChunks(
                task_id=task_id,
                context_id=context_id,
                artifact_id=self.artifact_id,
                name=ANSWER_ARTIFACT_NAME,
            )
        chunk = form.render(text, append=self.chunks_sent > 0, last=last)
        self.chunks_sent += 1
        await self._sink.send(chunk)
