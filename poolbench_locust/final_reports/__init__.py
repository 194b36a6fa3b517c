"""A distributed run's master quits after its workers' final reports, not half a second after asking."""

LAYER = "start"
"""It knows Locust's runners only, as stop_timeout, whose wait it extends (tests/test_imports.py reads this)."""
