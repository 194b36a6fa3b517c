"""Infinity's /embeddings, /rerank and /classify. Run: locust -f locustfiles/infinity.py --host http://infinity:7997"""

from poolbench_locust import InfinityClassifyUser, InfinityEmbeddingsUser, InfinityRerankUser  # noqa: F401
