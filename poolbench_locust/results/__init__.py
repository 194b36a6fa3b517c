"""Results that travel: the JSON result of a run (--json-result), its schema, and poolbench-compare."""
