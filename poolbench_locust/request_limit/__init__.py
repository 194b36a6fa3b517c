"""--max-requests N: a run bounded by a request count, not seconds; it ends as Locust's -t ends one."""

LAYER = "start"
"""This room's place in the import layers (tests/test_imports.py reads it; docs/architecture.md#layers)."""
