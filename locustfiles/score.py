"""/score. Run: locust -f locustfiles/score.py [--host http://vllm:8000]"""

from poolbench_locust import ScoreUser  # noqa: F401  (Locust runs the User classes it finds here)
