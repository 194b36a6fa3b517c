"""Infinity's routes (michaelfeil/infinity; WIRE.md, "Infinity")."""

from __future__ import annotations

from poolbench_locust.endpoints.spec import Endpoint, data_answer, dimensions_field, model_field, results_answer

# Infinity's usage counts characters unless the server was started to count tokens: the figure
# is passed on as the server reported it, labelled "server".
INFINITY_EMBEDDINGS = Endpoint(
    route="/embeddings",
    shape="texts",
    server="infinity",
    body=lambda x, s: {
        **model_field(s),
        "input": list(x.texts),
        "encoding_format": s.encoding_format,
        **dimensions_field(s),
    },
    answer=data_answer("embedding"),
    encodings=frozenset({"float", "base64"}),
)

INFINITY_RERANK = Endpoint(
    route="/rerank",
    shape="pairs",
    server="infinity",
    body=lambda x, s: {**model_field(s), "query": x.query, "documents": list(x.texts), "return_documents": False},
    answer=results_answer,
)
