"""Which tenant a request names, and whether this server serves it: checked once, at the edge.

A request's tenant comes from the binding (the `/{tenant}/...` path of HTTP+JSON, `params.tenant`
of a JSON-RPC 1.0 method, the `tenant` field of a gRPC request; a 0.3 request, which cannot name
one, is within the card's tenant) and scopes everything the caller makes and reads
(stores.tenants). The empty string is no tenant: it is proto3's default, which a client may
write out and gRPC cannot tell from an absent field. A tenant named like a route of
this server (`tasks`, `v1`, `healthz`, ...: stores.tenants.ROUTE_NAMES) is refused on every
binding, not only on HTTP+JSON where `/tasks/tasks` would be a task rather than the list of tenant
`tasks`: a tenant must be reachable the same on every binding.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.errors import InvalidParamsError
from app.http.errors import TenantNotFoundError
from stores.tenants import check_tenant_names, tenant_name_problem


class Tenants:
    """The tenants a request may name: any tenant name when `served` is empty (A2A_TENANTS
    unset), else those and the card's (A2A_TENANT)."""

    def __init__(
        self,
        served: Iterable[str] = (),
        *,
        card_tenant: str | None = None,
        root: str | None = None,
    ) -> None:
        names = frozenset(served)
        check_tenant_names([*names, *filter(None, [card_tenant])])
        self.served = names | ({card_tenant} if card_tenant else set()) if names else None
        self.card_tenant = card_tenant or None
        """The tenant the card's interfaces name; also that of every 0.3 request: 0.3 cannot
        name one, and its clients reach this server through the card's 0.3 members."""
        self.root = root
        """The tenant of a request that names none (AGENTS_FILE: the first agent's, so that
        `/` and `/{first}/` are one scope); None: no tenant."""

    def check(self, value: object) -> str | None:
        """The tenant a request's raw `tenant` value names (None: no tenant), or -32602 / 400
        for one that is not a tenant name, 404 for one this server does not serve."""
        if value is None or value == "":
            return self.root
        if not isinstance(value, str):
            raise InvalidParamsError("tenant must be a string", field="tenant")
        if (problem := tenant_name_problem(value)) is not None:
            raise InvalidParamsError(problem, field="tenant")
        if self.served is not None and value not in self.served:
            raise TenantNotFoundError(f"This server does not serve tenant {value!r}", tenant=value)
        return value
