"""Pooling metrics: a collector fed by the engine's request events, and its place in every Locust report."""
