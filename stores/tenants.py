"""Tenants in the owner: what a principal makes within a tenant belongs to one owner string.

Every store key and lookup already takes the owner, so a tenant-qualified owner scopes tasks,
journals, conversations, context claims, push configs, leases and rate-limit buckets by tenant
with no store knowing about tenants, and keeps each owner's keys under one Redis Cluster hash tag.

    no tenant:        <principal owner>            "anonymous", "api-key:alice", "jwt:<sub>"
    within a tenant:  <tenant>/<principal owner>   "acme/anonymous", "acme/api-key:alice"

A tenant name has neither `/` nor `:`, and every principal owner is `anonymous` or starts with
`<scheme>:`, so the part before the first `/` is a tenant name in a tenant-qualified owner and
never in another: no tenant can name an owner outside it, and no principal one inside a tenant.
The tenant of an owner can be read back (`tenant_of`): a replica taking over a turn knows from
the owner alone which tenant (and so, later, which agent) the task belongs to.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_TENANT_LENGTH = 64

TENANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._~-]*")
"""A letter or digit, then letters, digits and `.`, `_`, `~`, `-`: the URL's unreserved
characters, so a name is the same in a path segment (`/{tenant}/tasks`), in JSON and in a key,
with no encoding; it cannot be `.` or `..`, nor start like `.well-known`."""

ROUTE_NAMES = frozenset(
    {
        "tasks",
        "extendedAgentCard",
        "v1",
        "healthz",
        "readyz",
        "metrics",
        "console",
        "openapi.json",
        "agents",
    }
)
"""Names no tenant may take: the first path segments of the server's routes (a test keeps the
set equal to them). The HTTP+JSON binding serves a tenant at `/{tenant}/...`, which must never
meet a route of its own (`/tasks/tasks` is a task, not the list of tenant `tasks`)."""

_SEPARATOR = "/"


def is_tenant_name(name: str) -> bool:
    """The syntax of a tenant name (ROUTE_NAMES aside: see `tenant_name_problem`)."""
    return len(name) <= MAX_TENANT_LENGTH and TENANT_NAME.fullmatch(name) is not None


def tenant_name_problem(name: str) -> str | None:
    """What is wrong with `name` as a tenant name, or None."""
    if len(name) > MAX_TENANT_LENGTH:
        return f"tenant is longer than {MAX_TENANT_LENGTH} characters"
    if not is_tenant_name(name):
        return (
            f"tenant {name!r} is not a tenant name: letters, digits, '.', '_', '~' and '-',"
            " starting with a letter or a digit"
        )
    if name in ROUTE_NAMES:
        return f"tenant {name!r} is reserved: /{name}/ is a route of this server"
    return None


def check_tenant_names(names: Iterable[str]) -> None:
    """ValueError naming the first of `names` (configured ones) that is no tenant name."""
    for name in names:
        if (problem := tenant_name_problem(name)) is not None:
            raise ValueError(problem)


def tenant_owner(tenant: str | None, owner: str) -> str:
    """The owner of what `owner` (a principal's) makes within `tenant`; `owner` itself when
    there is no tenant. `tenant` must be a tenant name (ValueError otherwise)."""
    if tenant is None:
        return owner
    if not is_tenant_name(tenant):
        raise ValueError(f"{tenant!r} is not a tenant name")
    return f"{tenant}{_SEPARATOR}{owner}"


def tenant_of(owner: str) -> str | None:
    """The tenant of a tenant-qualified owner; None for an owner outside every tenant."""
    head, separator, _ = owner.partition(_SEPARATOR)
    return head if separator and is_tenant_name(head) else None
