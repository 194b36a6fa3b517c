"""/rerank (or /v1/rerank, /v2/rerank with --endpoint-path). Run: locust -f locustfiles/rerank.py [--host http://vllm:8000]"""

from poolbench_locust import RerankUser  # noqa: F401  (Locust runs the User classes it finds here)
