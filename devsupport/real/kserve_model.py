"""A KServe embedder: KServe's own Python ModelServer (the `kserve` package), serving one model over the v1
and v2 (Open Inference Protocol) REST routes, for tests/real.

Run with the kserve venv's Python (devsupport/real/install.sh kserve):

    python kserve_model.py HTTP_PORT

The model, `minilm`, takes one BYTES tensor `TEXT` of shape [-1] (v2) or a list of `instances` (v1) and
answers one FP32 tensor `EMBEDDING` of shape [-1, 384] (v1: `predictions`, a list a text): each text's
vector drawn from a generator seeded by its CRC-32, unit length, as devsupport/real/triton_model.py does.
The test judges KServe's server and protocol, not a model.
"""

from __future__ import annotations

import sys
import zlib
from typing import Any
from uuid import uuid4

import numpy as np
import uvicorn
from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer

MODEL = "minilm"
DIM = 384


def embed(text: str | bytes) -> np.ndarray:
    raw = text if isinstance(text, bytes) else text.encode()
    vector = np.random.default_rng(zlib.crc32(raw)).standard_normal(DIM).astype(np.float32)
    return vector / np.linalg.norm(vector)


class Embedder(Model):  # type: ignore[misc]  (kserve ships no type hints)
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.ready = True

    def get_input_types(self) -> list[dict[str, Any]]:
        return [{"name": "TEXT", "datatype": "BYTES", "shape": [-1]}]

    def get_output_types(self) -> list[dict[str, Any]]:
        return [{"name": "EMBEDDING", "datatype": "FP32", "shape": [-1, DIM]}]

    async def predict(self, payload: Any, headers: Any = None, response_headers: Any = None) -> Any:
        if isinstance(payload, InferRequest):  # v2
            texts = payload.inputs[0].data
            vectors = np.stack([embed(t) for t in texts])
            output = InferOutput(name="EMBEDDING", shape=list(vectors.shape), datatype="FP32", data=vectors)
            # KServe's REST layer writes each output as the request asked (an output's `binary_data`, else the
            # request's `binary_data_output`): raw after the JSON head, or a JSON list. The protocol's request id
            # is optional, the response's not (KServe's pydantic model refuses None).
            return InferResponse(
                model_name=self.name,
                infer_outputs=[output],
                response_id=payload.id or uuid4().hex,
                use_binary_outputs=payload.use_binary_outputs,
                requested_outputs=payload.request_outputs,
            )
        return {"predictions": [embed(t).tolist() for t in payload["instances"]]}  # v1


class _Loopback(uvicorn.Config):  # type: ignore[misc]
    """KServe's REST server binds 0.0.0.0, with no option: a test's server listens on 127.0.0.1 only."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["host"] = "127.0.0.1"
        super().__init__(*args, **kwargs)


if __name__ == "__main__":
    uvicorn.Config = _Loopback
    ModelServer(http_port=int(sys.argv[1]), enable_grpc=False, workers=1).start([Embedder(MODEL)])
