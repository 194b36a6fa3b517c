"""A small OpenAI-compatible /v1/embeddings server that answers from a cache, so that a benchmark of
clients measures the clients: each answer's bytes are made once per shape (inputs x dimensions) and
sent again as they are.

    python bench/cache_server.py [--port 0] [--dim 384]

Prints `cache-server listening on http://127.0.0.1:PORT` when ready. Binds 127.0.0.1 only. HTTP/1.1
keep-alive with Content-Length bodies (what every client compared sends), one asyncio protocol per
connection. A request's `dimensions` is honoured, else --dim; `input` may be a string or a list. It
also answers GET /v1/models (some clients ask which model is served) and 404 elsewhere.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys

import orjson

LISTENING = "cache-server listening on "
MODEL = "mock-model"
MAX_HEAD = 64 * 1024
MAX_BODY = 64 * 1024 * 1024


def embeddings_answer(inputs: int, dim: int) -> bytes:
    rng = random.Random(inputs * 100_003 + dim)
    data = [
        {"object": "embedding", "index": i, "embedding": [rng.uniform(-1, 1) for _ in range(dim)]}
        for i in range(inputs)
    ]
    usage = {"prompt_tokens": 16 * inputs, "total_tokens": 16 * inputs}
    return orjson.dumps({"object": "list", "data": data, "model": MODEL, "usage": usage})


def http_response(status: str, body: bytes) -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


MODELS = http_response("200 OK", orjson.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}))
NOT_FOUND = http_response("404 Not Found", b'{"error":"not found"}')
BAD_REQUEST = http_response("400 Bad Request", b'{"error":"bad request"}')


class Cache:
    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.answers: dict[tuple[int, int], bytes] = {}

    def answer(self, body: bytes) -> bytes:
        try:
            request = orjson.loads(body)
            inputs = request.get("input")
            count = len(inputs) if isinstance(inputs, list) else 1
            dim = int(request.get("dimensions") or self.dim)
        except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
            return BAD_REQUEST
        key = (count, dim)
        found = self.answers.get(key)
        if found is None:
            found = self.answers[key] = http_response("200 OK", embeddings_answer(count, dim))
        return found


class Connection(asyncio.Protocol):
    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > MAX_HEAD:
                    self._close()
                return
            head = bytes(self.buffer[:end]).decode("latin-1")
            lines = head.split("\r\n")
            method, path = [*lines[0].split(" "), "", ""][:2]
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip() or 0)
            if length > MAX_BODY:
                self._close()
                return
            if len(self.buffer) < end + 4 + length:
                return
            body = bytes(self.buffer[end + 4 : end + 4 + length])
            del self.buffer[: end + 4 + length]
            assert self.transport is not None
            if method == "POST" and path.split("?")[0].endswith("/embeddings"):
                self.transport.write(self.cache.answer(body))
            elif method == "GET" and path.split("?")[0] == "/v1/models":
                self.transport.write(MODELS)
            else:
                self.transport.write(NOT_FOUND)

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def serve(port: int, dim: int) -> None:
    cache = Cache(dim)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Connection(cache), "127.0.0.1", port, backlog=1024)
    bound = server.sockets[0].getsockname()[1]
    print(f"{LISTENING}http://127.0.0.1:{bound}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--dim", type=int, default=384, help="dimensions of a request that names none")
    args = parser.parse_args()
    try:
        asyncio.run(serve(args.port, args.dim))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
