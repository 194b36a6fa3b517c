"""--ab-host: two servers measured on one schedule, and B's figures against A's, each difference with its
interval and a verdict beyond or within noise."""

LAYER = "start"
"""Its start check sends each host the preflight; it imports nothing above (tests/test_imports.py reads this)."""
