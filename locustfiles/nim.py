"""NVIDIA NIM's /v1/ranking. Run: locust -f locustfiles/nim.py --host http://nim:8000 --model nvidia/..."""

from poolbench_locust import NIMRankingUser  # noqa: F401
