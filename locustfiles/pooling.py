"""/pooling. Run: locust -f locustfiles/pooling.py [--host http://vllm:8000]"""

from poolbench_locust import PoolingUser  # noqa: F401  (Locust runs the User classes it finds here)
