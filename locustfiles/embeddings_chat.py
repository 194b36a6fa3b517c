"""/v1/embeddings with chat messages. Run: locust -f locustfiles/embeddings_chat.py [--host http://vllm:8000]"""

from poolbench_locust import EmbeddingsChatUser  # noqa: F401  (Locust runs the User classes it finds here)
