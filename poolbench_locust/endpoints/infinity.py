"""Infinity's routes (michaelfeil/infinity; WIRE.md, "Infinity")."""

from __future__ import annotations

from typing import Any

from poolbench_locust.endpoints import image_parts, packed
from poolbench_locust.endpoints.spec import (
    Endpoint,
    ParsedAnswer,
    data_answer,
    item_values,
    items_of,
    label_scores,
    label_values,
    model_field,
    results_answer,
    usage_tokens,
)

# No truncation and no input_type: Infinity's request has neither (it always cuts at the model's
# max_seq_length itself), so --truncate and --input-type stop the run at start.
NO_TOKENIZE = "Infinity has no /tokenize route; count with --tokenizer instead"


def _classify_answer(doc: Any) -> ParsedAnswer:
    """`{"object": "classify", "data": [[{"score", "label"}]], "usage"}`: one list of label scores per input."""
    data = items_of(doc, "data")
    for i, scores in enumerate(data):
        label_scores(scores, f"data[{i}]")
    return ParsedAnswer(len(data), usage_tokens(doc), values=item_values(data, label_values, "data"))


# Infinity's usage counts characters unless the server was started to count tokens: the figure
# is passed on as the server reported it, labelled "server".
INFINITY_EMBEDDINGS = Endpoint(
    route="/embeddings",
    shape="texts",
    server="infinity",
    body=lambda x, s: {
        **model_field(s),
        **({"input": image_parts.images_alone(x), "modality": "image"} if x.images else {"input": list(x.texts)}),
        "encoding_format": s.encoding_format,
        **packed.infinity_dimensions_field(s),
    },
    answer=data_answer("embedding"),
    images="alone",  # modality "image": each input an image URL or data URI, one embedding each
    encodings=frozenset({"float", "base64"}),
    vectors=True,
    embedding_types=packed.INFINITY_TYPES,  # the server's --embedding-dtype: its request has no such field
    # Infinity's request has no such fields: its base64 is always float32 in the server's byte order,
    # and a client decoding it as anything else blames the server for NaN vectors.
    cannot_send={
        "--embed-dtype": "Infinity's base64 is float32 only; leave --embed-dtype at float32",
        "--endianness": "Infinity's base64 is in the server's native byte order; leave --endianness at native",
        "--count-tokens-with-server": NO_TOKENIZE,
    },
)

INFINITY_RERANK = Endpoint(
    route="/rerank",
    shape="pairs",
    server="infinity",
    body=lambda x, s: {**model_field(s), "query": x.query, "documents": list(x.texts), "return_documents": False},
    answer=results_answer,
    cannot_send={"--count-tokens-with-server": NO_TOKENIZE},
)

INFINITY_CLASSIFY = Endpoint(
    route="/classify",
    shape="texts",
    server="infinity",
    body=lambda x, s: {**model_field(s), "input": list(x.texts)},
    answer=_classify_answer,
    compared_as="labels",
    cannot_send={"--count-tokens-with-server": NO_TOKENIZE},
)
