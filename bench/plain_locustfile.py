"""Plain Locust clients that know nothing of pooling, beside poolbench-locust in the benchmarks.

Pick one class on the command line. BENCH_BODY_FILE holds the request body, BENCH_ROUTE its route
(default /v1/embeddings); BENCH_USER_RATE (requests/s per user) sets a constant_throughput wait, none sends
back to back.
"""

import os
from pathlib import Path

import orjson
import simdjson
from locust import FastHttpUser, HttpUser, constant, constant_throughput, task

from bench.common import EMBEDDINGS, probe

BODY = Path(os.environ["BENCH_BODY_FILE"]).read_bytes()
ROUTE = os.environ.get("BENCH_ROUTE") or EMBEDDINGS
HEADERS = {"Content-Type": "application/json"}
RATE = os.environ.get("BENCH_USER_RATE")
WAIT = constant_throughput(float(RATE)) if RATE else constant(0)
probe()


class FastBuffered(FastHttpUser):
    """FastHttpUser as Locust reads by default: the whole body into memory, then the clock stops."""

    wait_time = WAIT

    @task
    def embed(self) -> None:
        self.client.post(ROUTE, data=BODY, headers=HEADERS)


class FastJson(FastHttpUser):
    """FastHttpUser reading the body and parsing it with resp.json(), as a locustfile that checks answers would."""

    wait_time = WAIT

    @task
    def embed(self) -> None:
        self.client.post(ROUTE, data=BODY, headers=HEADERS).json()


class FastOrjson(FastHttpUser):
    """FastHttpUser reading the body and parsing it with orjson: the least a client that checks a JSON answer does."""

    wait_time = WAIT

    @task
    def embed(self) -> None:
        orjson.loads(self.client.post(ROUTE, data=BODY, headers=HEADERS).content)


class FastSimdjson(FastHttpUser):
    """FastHttpUser reading the body and parsing it with simdjson, as a locustfile that checks answers would.

    One `simdjson.Parser` per user, reused for every answer: `parse(content)` copies the body into the
    parser's padded buffer and builds simdjson's tape of the whole document, so the JSON structure, the
    UTF-8 of every string and every number are checked and converted (a malformed body raises). It builds
    no Python objects: no lists, dicts or floats, and it reads no field of the answer (no count of the
    vectors, no dimensions, no token counts); the lazy proxy it returns is dropped at once, so the parser
    can take the next answer. The floor of a client that validates a JSON answer without keeping it.
    """

    wait_time = WAIT

    def on_start(self) -> None:
        self.parser = simdjson.Parser()

    @task
    def embed(self) -> None:
        self.parser.parse(self.client.post(ROUTE, data=BODY, headers=HEADERS).content)


class FastStream(FastHttpUser):
    """FastHttpUser with stream=True: Locust stops the clock at the headers; the body is read after."""

    wait_time = WAIT

    @task
    def embed(self) -> None:
        resp = self.client.post(ROUTE, data=BODY, headers=HEADERS, stream=True)
        for _ in resp.iter_content(256 * 1024, decode_content=False):
            pass


class Requests(HttpUser):
    """Locust's HttpUser (python-requests), reading the whole body as it does by default."""

    wait_time = WAIT

    @task
    def embed(self) -> None:
        self.client.post(ROUTE, data=BODY, headers=HEADERS)
