"""Voyage /v1/embeddings. Run: locust -f locustfiles/voyage.py --host https://api.voyageai.com --model voyage-3.5"""

from poolbench_locust import VoyageEmbedUser  # noqa: F401  (Locust runs the User classes it finds here)
