"""A2A 1.0 operations on plain JSON params: parse (wire_v1), call the RequestHandler, render.

Both bindings call these: JSON-RPC passes its `params` object; HTTP+JSON builds the same object
from the body, the path and the query string.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from agent.outbound import OutboundPolicy
from app.a2a.generations import (
    CURRENT_GENERATION,
    IF_GENERATION_MATCH,
    generation_param,
    with_generation,
)
from app.a2a.limits import RequestLimits
from app.a2a.params import check_id, check_message_ids, parse, parse_last_event_id
from app.a2a.push_params import check_push_url, render_push_config
from app.a2a.versions import Generation
from app.a2a.wire import (
    ListTasksParams,
    PushConfigParams,
    PushConfigRefParams,
    SendMessageParams,
    TaskIdParams,
    render_event,
    render_task,
    render_task_json,
)
from app.call_context import CallContext
from app.errors import (
    ExtendedAgentCardNotConfiguredError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotFoundError,
    UnsupportedOperationError,
    unreadable_task,
)
from app.handler import RequestHandler, SendRequest
from app.http.json_body import JsonObject
from stores.base import PushConfigStore, TaskQuery
from stores.ids import new_id
from stores.models import (
    JournalEntry,
    Message,
    MessageReply,
    PushAuthentication,
    PushConfig,
    Task,
    TaskState,
)

logger = logging.getLogger(__name__)


def _render_stored(task: Task, *, where: str, **shaping: Any) -> JsonObject | None:
    """A stored task as the wire shows it, or None (logged) if it cannot be rendered: poison data,
    such as a value nested deeper than the serializer goes, must not fail a whole list."""
    try:
        return render_task(task, **shaping)
    except Exception as exc:
        logger.warning(
            "%s | task_id=<%s> | the stored task cannot be rendered (%s); left out",
            where,
            task.id,
            type(exc).__name__,
        )
        return None


_NO_PUSH = "This agent does not send push notifications"


def _configuration(params: JsonObject) -> JsonObject | None:
    configuration = params.get("configuration")
    return configuration if isinstance(configuration, dict) else None


class Operations:
    def __init__(
        self,
        handler: RequestHandler,
        *,
        limits: RequestLimits | None = None,
        extended_card: Callable[[str, bool, str | None, bool], JsonObject | None] | None = None,
        pushes: PushConfigStore | None = None,
        push_policy: OutboundPolicy | None = None,
        on_push_registered: Callable[[str, str], None] = lambda task_id, owner: None,
        long_poll_max_s: float = 30.0,
    ) -> None:
        """`long_poll_max_s`: the longest a 1.1 GetTask with `currentGeneration` waits
        (A2A_LONG_POLL_MAX_S)."""
        self._handler = handler
        self._long_poll_max_s = long_poll_max_s
        self._limits = limits or RequestLimits()
        self._push_store = pushes
        """None: this agent sends no push notifications (every push operation: -32003)."""
        self._push_policy = push_policy or OutboundPolicy()
        self._on_push_registered = on_push_registered
        self._extended_card = extended_card
        """The extended card at a base URL (with the 0.3 members or not; the 1.1 interfaces or
        not) of the agent of a tenant, or None."""

    async def create_push_config(
        self, params: JsonObject, *, context: CallContext, generation: Generation = "1.0"
    ) -> JsonObject:
        """Register a webhook for the caller's task (its events are POSTed as they happen)."""
        pushes = self._pushes()  # -32003 before anything else is looked at, when push is off
        parsed = parse(PushConfigParams, params, self._limits)
        if not parsed.task_id:
            raise InvalidParamsError("taskId is required", field="taskId")
        check_id("taskId", parsed.task_id)
        record = await self._handler.get_record(parsed.task_id, owner=context.owner)
        task, owner = record.task, context.owner
        config = self._push_config(
            parsed, generation=generation, task_generations=context.task_generations
        ).model_copy(update={"task_id": task.id})
        if not await pushes.list(task.id, owner=owner):
            # The task's first webhook gets what happens from now on, not its past.
            await pushes.advance(task.id, record.position, owner=owner)
        await pushes.put(config, owner=owner)
        if task.status.state.is_active:
            self._on_push_registered(task.id, owner)
        return render_push_config(config)

    async def get_push_config(self, params: JsonObject, *, context: CallContext) -> JsonObject:
        pushes, task_id, config_id = await self._push_target(params, context, need_id=True)
        config = await pushes.get(task_id, config_id, owner=context.owner)
        if config is None:
            raise TaskNotFoundError(
                f"Task {task_id!r} has no push notification config {config_id!r}", taskId=task_id
            )
        return render_push_config(config)

    async def list_push_configs(self, params: JsonObject, *, context: CallContext) -> JsonObject:
        pushes, task_id, _ = await self._push_target(params, context, need_id=False)
        configs = await pushes.list(task_id, owner=context.owner)
        return {"configs": [render_push_config(config) for config in configs], "nextPageToken": ""}

    async def delete_push_config(self, params: JsonObject, *, context: CallContext) -> JsonObject:
        """Idempotent: deleting a config that is not there (any more) succeeds."""
        pushes, task_id, config_id = await self._push_target(params, context, need_id=True)
        await pushes.delete(task_id, config_id, owner=context.owner)
        return {}

    async def _push_target(
        self, params: JsonObject, context: CallContext, *, need_id: bool
    ) -> tuple[PushConfigStore, str, str]:
        """The store, task id and config id ("" when not `need_id`) a push-config read or delete
        names, in the order its errors are owed: push off (-32003), bad params, no such task
        (the caller's), then a missing config id."""
        pushes = self._pushes()
        parsed = parse(PushConfigRefParams, params, self._limits)
        await self._handler.get_task(parsed.task_id, owner=context.owner)
        if need_id and not parsed.id:
            raise InvalidParamsError("id (the config's) is required", field="id")
        return pushes, parsed.task_id, parsed.id or ""

    def _pushes(self) -> PushConfigStore:
        if self._push_store is None:
            raise PushNotificationNotSupportedError(_NO_PUSH)
        return self._push_store

    def _push_config(
        self, parsed: PushConfigParams, *, generation: Generation, task_generations: bool = False
    ) -> PushConfig:
        check_push_url(parsed.url, self._push_policy)
        if parsed.id is not None:
            check_id("id", parsed.id)
        authentication = parsed.authentication
        return PushConfig(
            id=parsed.id or new_id(),
            task_id=parsed.task_id or "",
            url=parsed.url,
            token=parsed.token,
            authentication=(
                PushAuthentication(
                    scheme=authentication.scheme, credentials=authentication.credentials
                )
                if authentication is not None
                else None
            ),
            generation=generation,
            task_generations=task_generations and generation == "1.0",
        )

    async def extended_card(
        self,
        params: JsonObject,
        *,
        context: CallContext,
        generation: Generation = "1.0",
    ) -> JsonObject:
        """The extended card (A2A_EXTENDED_CARD) at the URL the caller used, in the caller's
        generation (a 0.3 caller gets the 0.3 members too). When there is none: in 1.0, where the
        card declares `extendedAgentCard: false`, the operation is unsupported (-32004); 0.3
        has its own error (-32007). Asked for in 1.1, it lists the 1.1 interfaces as the public
        card does."""
        url, with_v03 = context.base_url or "", generation == "0.3"
        with_v11 = context.task_generations and generation == "1.0"
        extended = self._extended_card
        card = extended(url, with_v03, context.tenant, with_v11) if extended else None
        if card is None:
            if with_v03:
                raise ExtendedAgentCardNotConfiguredError(
                    "This agent has no authenticated extended card"
                )
            raise UnsupportedOperationError("This agent has no extended agent card")
        return card

    async def send_message(
        self, params: JsonObject, *, context: CallContext, generation: Generation = "1.0"
    ) -> JsonObject:
        parsed = parse(SendMessageParams, params, self._limits)
        request = self._send_request(parsed, context, generation, _configuration(params))
        reply = await self._handler.send_message(request, owner=context.owner)
        if isinstance(reply, Message):  # answered directly: a Message, no task
            return render_event(MessageReply(message=reply))
        history_length = parsed.configuration.history_length if parsed.configuration else None
        if generation == "1.0":  # written as it is; the 0.3 bindings translate the dict
            task = render_task_json(
                reply, history_length=history_length, generation=context.task_generations
            )
            return {"task": task}
        return {"task": render_task(reply.task, history_length=history_length)}

    async def stream_message(
        self, params: JsonObject, *, context: CallContext, generation: Generation = "1.0"
    ) -> AsyncIterator[list[JournalEntry] | None]:
        parsed = parse(SendMessageParams, params, self._limits)
        request = self._send_request(parsed, context, generation, _configuration(params))
        return await self._handler.stream_message(request, owner=context.owner)

    def _send_request(
        self,
        params: SendMessageParams,
        context: CallContext,
        generation: Generation,
        raw_configuration: JsonObject | None = None,
    ) -> SendRequest:
        """`raw_configuration`: the params' `configuration` as sent (1.1's members are read
        from it: a 1.0 request is parsed exactly as before 1.1)."""
        check_message_ids(params)
        configuration = params.configuration
        push = configuration.task_push_notification_config if configuration else None
        if push is not None:
            self._pushes()  # -32003 unless this agent pushes
        task_generations = context.task_generations and generation == "1.0"
        raw = raw_configuration if task_generations else None
        return SendRequest(
            message=params.message,
            return_immediately=bool(configuration and configuration.return_immediately),
            trace_carrier=dict(context.trace_carrier),
            push_config=(
                self._push_config(push, generation=generation, task_generations=task_generations)
                if push
                else None
            ),
            extensions=context.activated_extensions,
            if_generation=generation_param(raw, IF_GENERATION_MATCH),
        )

    async def get_task(self, params: JsonObject, *, context: CallContext) -> JsonObject:
        """GetTask as a JSON object (the 0.3 translations and gRPC read its members)."""
        return await self._get_task(self._task_params(params), params, context)

    async def get_task_json(
        self, params: JsonObject, *, context: CallContext
    ) -> JsonObject | orjson.Fragment:
        """GetTask as the 1.0 bindings write it (`render_json`): the task as it is stored, which
        is its wire form, when the request shapes nothing (no historyLength, no long poll): no
        task built and dumped again, the read most clients poll with. The owner is part of the
        store's key, as in every read."""
        parsed = self._task_params(params)
        long_poll = context.task_generations and any(name in params for name in CURRENT_GENERATION)
        if parsed.history_length is not None or long_poll:
            return await self._get_task(parsed, params, context)
        found = await self._handler.get_task_bytes(parsed.id, owner=context.owner)
        if context.task_generations:
            return orjson.Fragment(with_generation(found.stored, found.position))
        return orjson.Fragment(found.stored)

    def _task_params(self, params: JsonObject) -> TaskIdParams:
        parsed = parse(TaskIdParams, params, self._limits)
        check_id("id", parsed.id)
        return parsed

    async def _get_task(
        self, parsed: TaskIdParams, params: JsonObject, context: CallContext
    ) -> JsonObject:
        handler, owner = self._handler, context.owner
        if not context.task_generations:
            task = await handler.get_task(parsed.id, owner=owner)
            rendered = _render_stored(task, where="GetTask", history_length=parsed.history_length)
            if rendered is None:
                raise unreadable_task(task.id)
            return rendered
        current = generation_param(params, CURRENT_GENERATION)  # 1.1: a long poll
        record = await (
            handler.get_record(parsed.id, owner=owner)
            if current is None
            else handler.get_record_past(
                parsed.id, current, owner=owner, timeout_s=self._long_poll_max_s
            )
        )
        rendered = _render_stored(
            record.task, where="GetTask", history_length=parsed.history_length
        )
        if rendered is None:
            raise unreadable_task(record.task.id)
        return rendered | {"generation": str(record.position)}

    async def list_tasks(self, params: JsonObject, *, context: CallContext) -> JsonObject:
        parsed = parse(ListTasksParams, params, self._limits)
        check_id("contextId", parsed.context_id)
        page_size = parsed.page_size or 50
        query = TaskQuery(
            context_id=parsed.context_id,
            state=None if parsed.status in (None, TaskState.UNSPECIFIED) else parsed.status,
            status_after=parsed.status_timestamp_after,
            page_size=page_size,
            page_token=parsed.page_token or None,
        )
        page = await self._handler.list_tasks(query, owner=context.owner)
        tasks = []
        with_generations = context.task_generations and len(page.positions) == len(page.tasks)
        for n, task in enumerate(page.tasks):
            rendered = _render_stored(
                task,
                where="ListTasks",
                history_length=parsed.history_length,
                include_artifacts=parsed.include_artifacts,
            )
            if rendered is not None:
                if with_generations:
                    rendered["generation"] = str(page.positions[n])
                tasks.append(rendered)
        return {
            "tasks": tasks,
            "nextPageToken": page.next_page_token,
            "pageSize": page_size,
            "totalSize": page.total_size,
        }

    async def cancel_task(self, params: JsonObject, *, context: CallContext) -> JsonObject:
        parsed = parse(TaskIdParams, params, self._limits)
        check_id("id", parsed.id)
        record = await self._handler.cancel_record(parsed.id, owner=context.owner)
        rendered = render_task(record.task)
        if context.task_generations:
            rendered["generation"] = str(record.position)
        return rendered

    async def subscribe(
        self, params: JsonObject, *, context: CallContext
    ) -> AsyncIterator[list[JournalEntry] | None]:
        parsed = parse(TaskIdParams, params, self._limits)
        check_id("id", parsed.id)
        return await self._handler.subscribe(
            parsed.id,
            owner=context.owner,
            last_event_id=parse_last_event_id(context.last_event_id),
        )
