"""A client that buffers the whole body (Locust's default reading), for comparison with poolbench-locust."""

import os

from locust import FastHttpUser, task


class BufferingUser(FastHttpUser):
    body = b'{"input": %s, "encoding_format": "bytes", "dimensions": %d}' % (
        b"[" + b",".join([b'"a b c"'] * 64) + b"]",
        int(os.environ["BENCH_DIMENSIONS"]),
    )

    @task
    def embed(self) -> None:
        self.client.post("/v1/embeddings", data=self.body, headers={"Content-Type": "application/json"})
