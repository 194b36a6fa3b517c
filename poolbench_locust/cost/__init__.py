"""--gpu-hour-cost: what a million input tokens and a thousand requests cost at the throughput measured (and at
the capacity --find-capacity found), beside the GPUs' energy per million input tokens where it was read."""

LAYER = "results"
"""Above capacity/ and servermetrics/, whose figures it prices (tests/test_imports.py reads this line)."""
