"""Persistence: task snapshots, per-task event journals, conversations (memory and Redis)."""
