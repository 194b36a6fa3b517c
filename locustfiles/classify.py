"""/classify. Run: locust -f locustfiles/classify.py [--host http://vllm:8000]"""

from poolbench_locust import ClassifyUser  # noqa: F401  (Locust runs the User classes it finds here)
