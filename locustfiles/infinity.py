"""Infinity's /embeddings and /rerank. Run: locust -f locustfiles/infinity.py --host http://infinity:7997"""

from poolbench_locust import InfinityEmbeddingsUser, InfinityRerankUser  # noqa: F401
