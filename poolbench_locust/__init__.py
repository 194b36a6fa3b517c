"""poolbench-locust: Locust User classes that load-test pooling model servers and measure the whole response.

Importing the package registers its command-line options and event listeners with Locust.
"""

from poolbench_locust import hooks, options  # noqa: F401  (registers Locust listeners)
from poolbench_locust.engine.user import EndpointUser
from poolbench_locust.users import (
    ClassifyUser,
    CohereEmbedUser,
    EmbeddingsChatUser,
    EmbeddingsUser,
    InfinityEmbeddingsUser,
    InfinityRerankUser,
    PoolingUser,
    RerankUser,
    ScoreUser,
    TEIEmbedUser,
    TEIRerankUser,
)

__all__ = [
    "ClassifyUser",
    "CohereEmbedUser",
    "EmbeddingsChatUser",
    "EmbeddingsUser",
    "EndpointUser",
    "InfinityEmbeddingsUser",
    "InfinityRerankUser",
    "PoolingUser",
    "RerankUser",
    "ScoreUser",
    "TEIEmbedUser",
    "TEIRerankUser",
]
