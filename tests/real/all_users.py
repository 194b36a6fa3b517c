"""Every User class, for `locust -f tests/real/all_users.py ClassName`: each test names the one it runs."""

from poolbench_locust import (  # noqa: F401  (Locust runs the User classes named on its command line)
    ClassifyUser,
    CohereEmbedUser,
    EmbeddingsChatUser,
    EmbeddingsUser,
    InfinityEmbeddingsUser,
    InfinityRerankUser,
    PoolingUser,
    RerankUser,
    ScoreUser,
)
