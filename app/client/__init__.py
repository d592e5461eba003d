"""A second product: the A2A client and the `a2a` CLI. It imports nothing else of ours."""
