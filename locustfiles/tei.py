"""TEI's routes: /embed, /rerank, /predict, /embed_sparse, /embed_all, /similarity.

Run: locust -f locustfiles/tei.py --host http://tei:80 (pick a class with its name after the options)
"""

from poolbench_locust import (  # noqa: F401
    TEIEmbedAllUser,
    TEIEmbedUser,
    TEIPredictUser,
    TEIRerankUser,
    TEISimilarityUser,
    TEISparseEmbedUser,
)
