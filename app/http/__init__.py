"""The HTTP server and its edge: uvicorn and ASGI tuning (the fenced fast paths), connection
limits, the guard (hosts, origins, body size), authentication and rate limits."""
