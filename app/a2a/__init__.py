"""The A2A wire: JSON-RPC and HTTP+JSON bindings, SSE, the agent card, the OpenAPI document."""
