"""TEI's /embed and /rerank. Run: locust -f locustfiles/tei.py --host http://tei:80"""

from poolbench_locust import TEIEmbedUser, TEIRerankUser  # noqa: F401
