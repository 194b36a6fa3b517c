"""Development-only code that tests/ and bench/ both use: free ports (ports.py), stopping the processes they
start (subprocesses.py), headless Chromium (browser.py), and the real vLLM and Infinity servers (real/: their
venvs, launcher and Prometheus reader).

Not shipped: pip installs the poolbench_locust package alone (pyproject.toml's packages.find), and the
Docker image copies only that. Importable from the repository's root, as tests/ and bench/ are: pytest
puts the root on sys.path (`pythonpath = ["."]`), a bench script or tests/real/run.py puts it there when
run as a file. It imports nothing from tests/ or bench/.
"""
