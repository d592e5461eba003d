"""Persistence: task snapshots, per-task event journals, conversations. Memory and Redis backends."""
