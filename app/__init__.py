"""The HTTP service: A2A bindings, SSE, agent card, settings and wiring."""
