"""Embeddings and rerank side by side: what `make demo` runs against the bundled mock server."""

from poolbench_locust import EmbeddingsUser, RerankUser  # noqa: F401
