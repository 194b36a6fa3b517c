"""The User classes: one per endpoint, each only a declaration on the measuring engine."""

from __future__ import annotations

from poolbench_locust.endpoints import infinity, kserve, nim, ollama, sglang, tei, vllm, voyage
from poolbench_locust.engine.user import EndpointUser


class EmbeddingsUser(EndpointUser):
    """vLLM / OpenAI `/v1/embeddings` with `input`: every encoding format."""

    endpoint = vllm.EMBEDDINGS


class EmbeddingsChatUser(EndpointUser):
    """vLLM `/v1/embeddings` with `messages`: one conversation, one embedding; with --batch-size N above 1,
    a list of N conversations, N embeddings (vLLM 0.34; workload/chat_batches.py)."""

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


class SGLangRerankUser(EndpointUser):
    """SGLang `/v1/rerank`: a bare list of results, tokens from each one's `meta_info`."""

    endpoint = sglang.SGLANG_RERANK


class SGLangScoreUser(EndpointUser):
    """SGLang `/v1/score`: a query and --documents items, one row of scores per item."""

    endpoint = sglang.SGLANG_SCORE


class NIMRankingUser(EndpointUser):
    """NVIDIA NIM `/v1/ranking`: a query and --documents passages, ranked by logit."""

    endpoint = nim.NIM_RANKING


class TEIPredictUser(EndpointUser):
    """Hugging Face TEI `/predict` (sequence classification): one list of label scores per input."""

    endpoint = tei.TEI_PREDICT


class TEISparseEmbedUser(EndpointUser):
    """Hugging Face TEI `/embed_sparse` (SPLADE): one list of index/value entries per input."""

    endpoint = tei.TEI_EMBED_SPARSE


class TEIEmbedAllUser(EndpointUser):
    """Hugging Face TEI `/embed_all`: one matrix per input, a row per token."""

    endpoint = tei.TEI_EMBED_ALL


class TEISimilarityUser(EndpointUser):
    """Hugging Face TEI `/similarity`: a source sentence against --documents sentences."""

    endpoint = tei.TEI_SIMILARITY


class InfinityClassifyUser(EndpointUser):
    """Infinity `/classify`: one list of label scores per input."""

    endpoint = infinity.INFINITY_CLASSIFY


class OllamaEmbedUser(EndpointUser):
    """Ollama's native `/api/embed`: tokens from prompt_eval_count, its own durations beside the client's times."""

    endpoint = ollama.OLLAMA_EMBED


class KServeInferUser(EndpointUser):
    """KServe v2 / Triton `/v2/models/{model}/infer`: the model's tensors from its metadata; JSON or binary tensors."""

    endpoint = kserve.KSERVE_INFER


class VoyageEmbedUser(EndpointUser):
    """Voyage `/v1/embeddings`: output_dtype (--embedding-type) and output_dimension (--dimensions)."""

    endpoint = voyage.VOYAGE_EMBEDDINGS
