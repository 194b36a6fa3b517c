"""/v1/embeddings. Run: locust -f locustfiles/embeddings.py [--host http://vllm:8000] [--encoding-format bytes]"""

from poolbench_locust import EmbeddingsUser  # noqa: F401  (Locust runs the User classes it finds here)
