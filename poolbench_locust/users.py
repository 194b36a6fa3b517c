"""The User classes: one per endpoint, each only a declaration on the measuring engine."""

from __future__ import annotations

from poolbench_locust.endpoints import infinity, kserve, ollama, tei, vllm
from poolbench_locust.engine.user import EndpointUser


class EmbeddingsUser(EndpointUser):
    """vLLM / OpenAI `/v1/embeddings` with `input`: every encoding format."""

    endpoint = vllm.EMBEDDINGS


class EmbeddingsChatUser(EndpointUser):
    """vLLM `/v1/embeddings` with `messages`: one conversation of --batch-size messages, one embedding."""

    endpoint = vllm.EMBEDDINGS_CHAT


class PoolingUser(EndpointUser):
    """vLLM's generic `/pooling` route: every encoding format."""

    endpoint = vllm.POOLING


class RerankUser(EndpointUser):
    """vLLM `/rerank` (also `/v1/rerank`, or Cohere-style `/v2/rerank` with --endpoint-path)."""

    endpoint = vllm.RERANK


class ScoreUser(EndpointUser):
    """vLLM `/score`: a query scored against --documents documents."""

    endpoint = vllm.SCORE


class ClassifyUser(EndpointUser):
    """vLLM `/classify`."""

    endpoint = vllm.CLASSIFY


class CohereEmbedUser(EndpointUser):
    """vLLM's Cohere-style `/v2/embed`."""

    endpoint = vllm.COHERE_EMBED


class InfinityEmbeddingsUser(EndpointUser):
    """Infinity `/embeddings` (float or base64)."""

    endpoint = infinity.INFINITY_EMBEDDINGS


class InfinityRerankUser(EndpointUser):
    """Infinity `/rerank`."""

    endpoint = infinity.INFINITY_RERANK


class TEIEmbedUser(EndpointUser):
    """Hugging Face TEI `/embed`: tokens and server timings from its x-* headers."""

    endpoint = tei.TEI_EMBED


class TEIRerankUser(EndpointUser):
    """Hugging Face TEI `/rerank`."""

    endpoint = tei.TEI_RERANK


class OllamaEmbedUser(EndpointUser):
    """Ollama's native `/api/embed`: tokens from prompt_eval_count, its own durations beside the client's times."""

    endpoint = ollama.OLLAMA_EMBED


class KServeInferUser(EndpointUser):
    """KServe v2 / Triton `/v2/models/{model}/infer`: the model's tensors from its metadata; JSON or binary tensors."""

    endpoint = kserve.KSERVE_INFER
