"""The HTTP service: the A2A wire (a2a/), the server and its edge (http/), operations (ops/),
the A2A client (client/), and the wiring of them all (main, services, settings)."""
