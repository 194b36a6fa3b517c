"""KServe v2 / Triton /v2/models/{model}/infer. Run: locust -f locustfiles/kserve.py --host http://triton:8000 --model M

The model's input and output tensors are learnt from GET /v2/models/M (or --infer-input, --infer-output).
"""

from poolbench_locust import KServeInferUser  # noqa: F401
