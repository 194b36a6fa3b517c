"""The server's own limits, learned before the run: a batch the server would refuse stops the run at
start, before any request is sent, instead of failing every request of it."""

LAYER = "start"
"""This room's place in the import layers (tests/test_imports.py reads it; docs/architecture.md#layers)."""
