"""/v2/embed (Cohere form). Run: locust -f locustfiles/cohere_embed.py [--host http://vllm:8000]"""

from poolbench_locust import CohereEmbedUser  # noqa: F401  (Locust runs the User classes it finds here)
