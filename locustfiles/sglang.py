"""SGLang's /v1/rerank and /v1/score. Run: locust -f locustfiles/sglang.py --host http://sglang:30000"""

from poolbench_locust import SGLangRerankUser, SGLangScoreUser  # noqa: F401
