"""The real servers, for tests/real (`make test-real`) and bench/real_vllm.py: install.sh builds their venvs,
servers.py starts and stops them, prometheus.py reads their /metrics."""
