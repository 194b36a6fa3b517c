"""A PyTriton embedder: Triton Inference Server (the binary nvidia-pytriton's wheel carries), on CPU, serving one
model over the KServe v2 / Open Inference Protocol, for tests/real.

Run with the triton venv's Python (devsupport/real/install.sh triton; Debian's own Python 3.11, whose
libpython Triton's python backend loads):

    python triton_model.py HTTP_PORT GRPC_PORT METRICS_PORT

The model, `minilm`, takes one BYTES tensor `TEXT` of shape [-1, 1] (a text a row) and answers one FP32 tensor
`EMBEDDING` of shape [-1, 384]: each text's vector is drawn from a generator seeded by the text's CRC-32, unit
length. Deterministic and nearly free: the test judges Triton's protocol, its batching and its /metrics, not
a model (Triton's model is the user's; Triton's own cost is in its front end and its queue).
"""

from __future__ import annotations

import sys
import zlib

import numpy as np
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig

MODEL = "minilm"
DIM = 384
MAX_BATCH = 64
"""Triton refuses a request of more rows than this ("inference request batch-size must be <= 64")."""


def embed(text: bytes) -> np.ndarray:
    vector = np.random.default_rng(zlib.crc32(text)).standard_normal(DIM).astype(np.float32)
    return vector / np.linalg.norm(vector)


@batch
def infer(TEXT: np.ndarray) -> dict[str, np.ndarray]:  # the argument is named after the tensor
    return {"EMBEDDING": np.stack([embed(bytes(row[0])) for row in TEXT])}


def main(http_port: int, grpc_port: int, metrics_port: int) -> None:
    config = TritonConfig(http_address="127.0.0.1", http_port=http_port, grpc_address="127.0.0.1",
                          grpc_port=grpc_port, metrics_address="127.0.0.1", metrics_port=metrics_port,
                          log_verbose=0)  # fmt: skip
    with Triton(config=config) as triton:
        triton.bind(
            model_name=MODEL,
            infer_func=infer,
            inputs=[Tensor(name="TEXT", dtype=bytes, shape=(1,))],
            outputs=[Tensor(name="EMBEDDING", dtype=np.float32, shape=(DIM,))],
            config=ModelConfig(max_batch_size=MAX_BATCH),
            strict=True,
        )
        triton.serve()


if __name__ == "__main__":
    main(*(int(arg) for arg in sys.argv[1:4]))
