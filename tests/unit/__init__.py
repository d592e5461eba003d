"""Unit tests (a package, so test module names cannot clash with tests/e2e or tests/fakes)."""
