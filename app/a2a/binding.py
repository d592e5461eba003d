"""What every protocol binding (JSON-RPC, HTTP+JSON of either generation) is built from."""

from __future__ import annotations

from app.a2a.operations import Operations
from app.http.edge import Edge
from app.ops.metrics import Metrics


class Binding:
    """The operations a binding serves, the edge its requests pass (authentication, rate), the
    nesting depth a JSON body may have, and the metrics its requests are counted in."""

    def __init__(
        self,
        operations: Operations,
        edge: Edge,
        *,
        max_json_depth: int = 32,
        metrics: Metrics | None = None,
    ) -> None:
        self._operations = operations
        self._edge = edge
        self._max_json_depth = max_json_depth
        self._metrics = metrics or Metrics()
