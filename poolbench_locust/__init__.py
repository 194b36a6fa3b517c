"""poolbench-locust: Locust User classes that load-test pooling model servers and measure the whole response.

Importing a User class from here registers the package's command-line options and event
listeners with Locust. The import is lazy so that `python -m poolbench_locust.mockserver`
starts without loading (and monkey-patching for) Locust.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from poolbench_locust.engine.user import EndpointUser
    from poolbench_locust.users import (
        ClassifyUser,
        CohereEmbedUser,
        EmbeddingsChatUser,
        EmbeddingsUser,
        InfinityClassifyUser,
        InfinityEmbeddingsUser,
        InfinityRerankUser,
        KServeInferUser,
        NIMRankingUser,
        OllamaEmbedUser,
        PoolingUser,
        RerankUser,
        ScoreUser,
        SGLangRerankUser,
        SGLangScoreUser,
        TEIEmbedAllUser,
        TEIEmbedUser,
        TEIPredictUser,
        TEIRerankUser,
        TEISimilarityUser,
        TEISparseEmbedUser,
        VoyageEmbedUser,
    )

__all__ = [
    "ClassifyUser",
    "CohereEmbedUser",
    "EmbeddingsChatUser",
    "EmbeddingsUser",
    "EndpointUser",
    "InfinityClassifyUser",
    "InfinityEmbeddingsUser",
    "InfinityRerankUser",
    "KServeInferUser",
    "NIMRankingUser",
    "OllamaEmbedUser",
    "PoolingUser",
    "RerankUser",
    "SGLangRerankUser",
    "SGLangScoreUser",
    "ScoreUser",
    "TEIEmbedAllUser",
    "TEIEmbedUser",
    "TEIPredictUser",
    "TEIRerankUser",
    "TEISimilarityUser",
    "TEISparseEmbedUser",
    "VoyageEmbedUser",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'poolbench_locust' has no attribute {name!r}")
    importlib.import_module("poolbench_locust.plugin")  # registers options and listeners once
    module = "poolbench_locust.engine.user" if name == "EndpointUser" else "poolbench_locust.users"
    return getattr(importlib.import_module(module), name)
