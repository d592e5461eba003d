"""Push notifications wired from the settings: the guarded client, the policy, the renderers.

Webhook bodies follow the generation of the client that registered the webhook: a 1.0 webhook
gets each journal event as a StreamResponse (SPEC 4.3.3); a 0.3 webhook gets the whole task in
the 0.3 JSON form at each state change (what 0.3 servers sent). See agent.runtime.push for delivery.
"""

from __future__ import annotations

from agent.outbound import OutboundPolicy, outbound_client
from agent.runtime.push import PushDelivery, PushPolicy
from app.a2a.v0_3.wire import Dialect, task_out
from app.a2a.wire import render_entry, render_entry_v11, render_task
from app.http.json_body import render_json
from app.settings import Settings
from stores.base import PushConfigStore, TaskStore
from stores.models import Task

_WEBHOOK_RESPONSE_LIMIT = 64 * 1024  # a webhook's answer is not read; a little is enough


# The conformance profile's webhooks are the TCK's own receiver, on the machine that runs it.
_TCK_WEBHOOK_HOSTS = ("localhost", "127.0.0.0/8", "::1")


def push_policy(settings: Settings) -> OutboundPolicy:
    """What webhooks may reach besides public addresses."""
    tck = _TCK_WEBHOOK_HOSTS if settings.agent_profile == "tck" else ()
    return OutboundPolicy.parse(
        [*settings.a2a_outbound_allow, *settings.a2a_push_allowed_hosts, *tck]
    )


def render_task_v03(task: Task) -> bytes:
    return render_json(task_out(render_task(task), Dialect.JSONRPC))


def build_push_delivery(
    settings: Settings, *, tasks: TaskStore, pushes: PushConfigStore
) -> PushDelivery:
    client = outbound_client(
        push_policy(settings),
        timeout_s=settings.a2a_push_timeout_s,
        max_response_bytes=_WEBHOOK_RESPONSE_LIMIT,
    )
    return PushDelivery(
        tasks=tasks,
        pushes=pushes,
        client=client,
        event_renderers={"1.0": render_entry, "1.1": render_entry_v11},
        task_renderers={"0.3": render_task_v03},
        policy=PushPolicy(
            max_attempts=settings.a2a_push_max_attempts,
            first_backoff_s=settings.a2a_push_backoff_s,
        ),
    )
