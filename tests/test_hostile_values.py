"""What a server sends is untrusted: its numbers, its vectors, its words, its redirects, its certificate.

Each case is a raw-socket server of its own (tests/support/hostile.py) that breaks one promise in one answer;
the request is one failed event whose message says what was wrong, and the next request of the same
user, answered well, succeeds.
"""

from __future__ import annotations

import base64
import csv
import os
import struct
from pathlib import Path
from typing import Any

import orjson
import pytest
from locust.stats import StatsCSV

import poolbench_locust as pb
from poolbench_locust.engine import failure_messages
from poolbench_locust.engine.plan import plan_for
from poolbench_locust.options import OptionError
from poolbench_locust.start_checks import configuration_error
from tests.support.bad_then_good import BATCH, Responder, assert_failed_then_ok, bad_then_good
from tests.support.harness import Run, failure_text, options
from tests.support.hostile import HostileServer, make_cert, response, serve_requests

SECRET = "sk-hostile-SECRET-0123456789"


def embeddings(vectors: list[Any] | None = None, usage: Any = 8, **extra: Any) -> bytes:
    """An OpenAI-style /v1/embeddings answer of these vectors (two good ones unless given)."""
    vectors = [[0.5, 0.25, 0.125, 1.0], [1.0, 0.5, 0.25, 0.125]] if vectors is None else vectors
    doc = {"object": "list", "data": [{"index": i, "embedding": v} for i, v in enumerate(vectors)], **extra}
    if usage is not ...:
        doc["usage"] = {"prompt_tokens": usage, "total_tokens": 8}
    return response(200, orjson.dumps(doc))


# ---- 11.3: implausible token counts ----------------------------------------------------------------

IMPLAUSIBLE = [
    (2**63, "usage.prompt_tokens is implausible"),
    (10**9, "usage.prompt_tokens is implausible"),
    (-1, "usage.prompt_tokens is negative: -1"),
    (True, "usage.prompt_tokens is not a whole number: True"),
    (1.5, "usage.prompt_tokens is not a whole number: 1.5"),
    ("12", "usage.prompt_tokens is not a whole number: '12'"),
]


@pytest.mark.parametrize(("tokens", "expected"), IMPLAUSIBLE, ids=[repr(v)[:12] for v, _ in IMPLAUSIBLE])
def test_an_implausible_usage_count_is_one_failure(tokens, expected):
    assert_failed_then_ok(pb.EmbeddingsUser, embeddings(usage=tokens), embeddings(), expected)


def test_implausible_counts_in_cohere_meta_rerank_meta_and_bytes_metadata():
    cohere = {"embeddings": {"float": [[0.5, 1.0], [1.0, 0.5]]}, "meta": {"billed_units": {"input_tokens": -3}}}
    good = {**cohere, "meta": {"billed_units": {"input_tokens": 8}}}
    assert_failed_then_ok(
        pb.CohereEmbedUser,
        response(200, orjson.dumps(cohere)),
        response(200, orjson.dumps(good)),
        "meta.billed_units.input_tokens is negative: -3",
    )
    results = [{"index": i, "relevance_score": 0.5} for i in range(2)]
    # An integer past 64 bits, which orjson cannot write but a server can (orjson reads it as a float).
    rerank = orjson.dumps({"results": results, "meta": {"tokens": {"input_tokens": 0}}})
    rerank = rerank.replace(b'"input_tokens":0', b'"input_tokens":%d' % (2**64 + 1))
    assert_failed_then_ok(
        pb.RerankUser,
        response(200, rerank),
        response(200, orjson.dumps({"results": results, "usage": {"prompt_tokens": 8}})),
        "meta.tokens.input_tokens is not a whole number: 1.8446744073709552e+19",
        "--documents",
        "2",
    )
    body = struct.pack("=8f", *([0.5] * 8))
    meta = {"data": [{"index": i, "start": i * 16, "end": (i + 1) * 16} for i in range(2)]}
    bad = {**meta, "usage": {"prompt_tokens": 2**63}}
    good = {**meta, "usage": {"prompt_tokens": 8}}

    def binary(doc: dict[str, Any]) -> bytes:
        return response(
            200, body, headers=[("metadata", orjson.dumps(doc).decode())], content_type="application/octet-stream"
        )

    assert_failed_then_ok(
        pb.EmbeddingsUser,
        binary(bad),
        binary(good),
        "metadata usage.prompt_tokens is implausible",
        "--encoding-format",
        "bytes",
    )


@pytest.mark.parametrize("count", [2**63, -2, 2.5, None, "²"], ids=["2**63", "negative", "float", "null", "str"])
def test_an_implausible_tokenize_count_stops_the_run_at_start(count, monkeypatch):
    answer: Responder = lambda *_: response(200, orjson.dumps({"count": count}))  # noqa: E731
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    heads: list[bytes] = []
    server = HostileServer(serve_requests(lambda head, body, n: heads.append(head.lower()) or answer(head, body, n)))
    try:
        with pytest.raises(OptionError, match=r"^--count-tokens-with-server: .* gave no token count"):
            plan_for(pb.EmbeddingsUser, options("--count-tokens-with-server", "--api-key-from-env"), server.url)
    finally:
        server.close()
    assert f"authorization: bearer {SECRET.lower()}".encode() in heads[0], "/tokenize gets the key the run sends"


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ({"embed_dtype": ["float32"]}, "unknown embed_dtype \"['float32']\" in the answer"),
        ({"endianness": {"x": 1}}, "unknown endianness \"{'x': 1}\" in the answer"),
        ({"end": 1e300}, "metadata offsets do not match the body"),
        ({"start": "x"}, "metadata items lack integer start/end offsets"),
    ],
    ids=["dtype-list", "endianness-object", "huge-end", "text-start"],
)
def test_bytes_metadata_of_the_wrong_types_is_one_failure(item, expected):
    body = struct.pack("=8f", *([0.5] * 8))
    good = [{"index": i, "start": i * 16, "end": (i + 1) * 16} for i in range(2)]
    bad = [{**good[0], **item}, good[1]]

    def binary(data: list[dict[str, Any]]) -> bytes:
        meta = orjson.dumps({"data": data, "usage": {"prompt_tokens": 8}}).decode()
        return response(200, body, headers=[("metadata", meta)], content_type="application/octet-stream")

    args = ("--encoding-format", "bytes", "--check-vectors")
    assert_failed_then_ok(pb.EmbeddingsUser, binary(bad), binary(good), expected, *args)


TEI_HEADERS = {
    "x-compute-time": "3",
    "x-total-time": "4",
    "x-tokenization-time": "1",
    "x-queue-time": "1",
    "x-inference-time": "2",
    "x-compute-tokens": "8",
}


@pytest.mark.parametrize(
    ("header", "value", "expected"),
    [
        ("x-compute-tokens", "²", "x-compute-tokens header is not a whole number: '²'"),
        ("x-compute-tokens", "9" * 30, "x-compute-tokens header is not a whole number"),
        ("x-queue-time", "¹", "x-queue-time header is not a whole number: '¹'"),
        ("x-inference-time", "999999999999", "x-inference-time header is implausible"),
    ],
)
def test_tei_headers_that_are_not_plausible_numbers_are_one_failure(header, value, expected):
    vectors = orjson.dumps([[0.5, 1.0], [1.0, 0.5]])
    bad = response(200, vectors, headers=list({**TEI_HEADERS, header: value}.items()))
    good = response(200, vectors, headers=list(TEI_HEADERS.items()))
    _, ok, _ = bad_then_good(pb.TEIEmbedUser, bad, good)
    assert ok["context"]["input_tokens"] == 8 and ok["context"]["server_queue_ms"] == 1, "good headers still count"
    assert_failed_then_ok(pb.TEIEmbedUser, bad, good, expected)


# ---- 11.6: --check-vectors -------------------------------------------------------------------------


def binary_only(dims: int, batch: int = 2) -> bytes:
    return response(
        200, struct.pack(f"={dims * batch}f", *([0.25] * (dims * batch))), content_type="application/octet-stream"
    )


def test_bytes_only_learns_the_dimension_before_checking_the_first_vector():
    server = HostileServer(serve_requests(lambda *_: binary_only(384)))
    try:
        run = Run(pb.EmbeddingsUser, server.url, *BATCH, "--encoding-format", "bytes_only", "--check-vectors")
        events = [run.one() for _ in range(3)]
    finally:
        server.close()
    assert [failure_text(e) for e in events] == ["", "", ""]
    assert run.user.plan.form.dims == 384


def test_bytes_only_first_vector_of_zeros_is_caught_before_the_dimension_is_known():
    zeros = response(200, bytes(2 * 16 * 4), content_type="application/octet-stream")
    assert_failed_then_ok(
        pb.EmbeddingsUser,
        zeros,
        binary_only(16),
        "embedding is all zeros",
        "--encoding-format",
        "bytes_only",
        "--check-vectors",
    )


@pytest.mark.parametrize(
    "vector", [5, None, "abc", {"a": 1}, ["x", "y"]], ids=["int", "null", "string", "object", "strings"]
)
@pytest.mark.parametrize("validate", [True, False], ids=["validate", "no-validate"])
def test_an_embedding_that_is_not_a_list_of_numbers_says_so(vector, validate):
    args = ["--check-vectors"] if validate else ["--check-vectors", "--no-validate"]
    bad = embeddings([vector, [0.5, 1.0]])
    expected = "embedding 0 is not a list of numbers"
    message = assert_failed_then_ok(pb.EmbeddingsUser, bad, embeddings(), expected, *args)
    assert "client error" not in message


NAN_AS_NULL = "holds null: a NaN or infinite value, written as null"


@pytest.mark.parametrize(
    ("vectors", "args", "expected"),
    [
        ([[0.5, 1.0, 0.25], [0.5, None, 0.25]], [], f"embedding 1 {NAN_AS_NULL}"),
        ([[0.5, 1.0, 0.25, None], [0.5, 1.0, 0.25, 0.5]], [], f"embedding 0 {NAN_AS_NULL}"),
        ([[0.5, 1.0, 0.25], [0.5, 1.0, True]], [], "embedding 1 is not a list of numbers"),
        ([[0.5, None, 0.25], [0.5, 1.0, 0.25]], ["--no-validate", "--check-vectors"], f"embedding 0 {NAN_AS_NULL}"),
    ],
    ids=["null", "null-last", "boolean", "check-vectors"],
)
def test_a_nan_written_as_null_inside_a_vector_is_one_failure_saying_so(vectors, args, expected):
    """vLLM writes a NaN (or infinity) in a float answer as null: validated answers (the default) fail it."""
    message = assert_failed_then_ok(pb.EmbeddingsUser, embeddings(vectors), embeddings(), expected, *args)
    assert message == expected


def test_a_null_elsewhere_in_the_answer_is_no_failure():
    answer = embeddings(model=None, id="null-fox", system_fingerprint=False)
    assert_failed_then_ok(
        pb.EmbeddingsUser, embeddings([[0.5, None], [0.5, 0.5]]), answer, f"embedding 0 {NAN_AS_NULL}"
    )


def test_with_dimensions_an_answer_of_another_dimension_fails_float_and_base64():
    assert_failed_then_ok(
        pb.EmbeddingsUser,
        embeddings([[0.5] * 8, [0.5] * 7]),
        embeddings([[0.5] * 8, [0.5] * 8]),
        "embedding 1 has 7 dimensions, expected 8",
        "--dimensions",
        "8",
    )

    def b64(dims: int) -> str:
        return base64.b64encode(struct.pack(f"={dims}f", *([0.5] * dims))).decode()

    assert_failed_then_ok(
        pb.EmbeddingsUser,
        embeddings([b64(6), b64(8)]),
        embeddings([b64(8), b64(8)]),
        "embedding 0 has 6 dimensions, expected 8",
        "--dimensions",
        "8",
        "--encoding-format",
        "base64",
        "--check-vectors",
    )
    assert_failed_then_ok(
        pb.EmbeddingsUser,
        embeddings([[0.5] * 8, [0.5] * 8]),
        embeddings([b64(8), b64(8)]),
        "embedding 0 is not a base64 string",
        "--encoding-format",
        "base64",
    )


# ---- 11.7 and 18.3: the server's words -------------------------------------------------------------


def error(status: int, message: str) -> bytes:
    return response(status, orjson.dumps({"error": {"message": message, "type": "x", "code": status}}))


def test_control_characters_in_a_server_message_are_escaped():
    hostile = "model \x1b[2J\x1b[31mexploded\x07\r\nfake: line\u202e"
    message = assert_failed_then_ok(pb.EmbeddingsUser, error(500, hostile), embeddings(), "HTTP 500: model ")
    assert message == "HTTP 500: model \\x1b[2J\\x1b[31mexploded\\x07\\r\\nfake: line\\u202e"
    assert message.isprintable()


def test_a_server_that_echoes_the_api_key_never_shows_it():
    echo = error(401, f"Incorrect API key provided: {SECRET}. You can find your API key at ...")
    failed, ok, run = bad_then_good(pb.EmbeddingsUser, echo, embeddings(), "--api-key", SECRET)
    assert failure_text(failed) == "HTTP 401: Incorrect API key provided: ***. You can find your API key at ..."
    assert ok["exception"] is None
    errors = [e.to_dict() for e in run.env.stats.errors.values()]
    assert errors and SECRET not in repr(errors)


def test_the_user_and_password_of_the_host_url_are_sent_as_basic_auth():
    heads: list[bytes] = []

    def record(head: bytes, _body: bytes, _n: int) -> bytes:
        heads.append(head)
        return embeddings()

    server = HostileServer(serve_requests(record))
    try:
        event = Run(pb.EmbeddingsUser, server.url.replace("http://", "http://us%40er:p%3Aw@"), *BATCH).one()
    finally:
        server.close()
    assert event["exception"] is None, failure_text(event)
    assert b"\r\nAuthorization: Basic " + base64.b64encode(b"us@er:p:w") + b"\r\n" in heads[0]


def test_a_server_that_echoes_the_password_of_the_host_url_never_shows_it():
    server = HostileServer(serve_requests(lambda *_: error(401, "wrong password pw-HOST-secret-42 for user")))
    try:
        host = server.url.replace("http://", "http://user:pw-HOST-secret-42@")
        event = Run(pb.EmbeddingsUser, host, *BATCH).one()
    finally:
        server.close()
    assert failure_text(event) == "HTTP 401: wrong password *** for user"


def test_unique_60_kb_error_messages_keep_the_failures_table_and_memory_bounded(tmp_path):
    requests = 400
    answer: Responder = lambda _h, _b, n: error(500, f"failure {n:06d} " + "x" * 60_000)  # noqa: E731
    server = HostileServer(serve_requests(answer))
    try:
        run = Run(pb.EmbeddingsUser, server.url, *BATCH)
        run.env.create_local_runner()
        rss_before = _rss_mb()
        for _ in range(requests):
            run.one()
        grown = _rss_mb() - rss_before
    finally:
        server.close()
    stats = run.env.stats
    assert stats.total.num_failures == requests
    rows = list(stats.errors.values())
    limit = failure_messages.DISTINCT_MESSAGES + failure_messages.DISTINCT_GROUPS + 1
    assert len(rows) <= limit, len(rows)
    assert sum(r.occurrences for r in rows) == requests, "every failure is counted in some row"
    assert max(len(str(r.error)) for r in rows) <= failure_messages.MESSAGE_LIMIT + 100
    assert any("messages grouped" in str(r.error) for r in rows)
    with open(tmp_path / "run_failures.csv", "w", newline="") as f:  # Locust's own failures CSV writer
        StatsCSV(run.env, [0.5]).failures_csv(csv.writer(f))
    size = (tmp_path / "run_failures.csv").stat().st_size
    print(f"failure rows {len(rows)}, failures CSV {size} bytes, RSS grew {grown:.1f} MB over {requests} requests")
    assert size < 80_000, size
    assert grown < 15, f"RSS grew {grown:.1f} MB"


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def test_clean_redacts_before_it_cuts_so_no_part_of_the_key_survives():
    text = "x" * (failure_messages.MESSAGE_LIMIT - 5) + SECRET
    assert SECRET[:5] not in failure_messages.clean(text, [SECRET])
    assert failure_messages.clean("é ok ü 字") == "é ok ü 字", "printable text is left as it is"


# ---- 18.2: redirects -------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [301, 302, 303])
def test_a_redirect_that_would_turn_the_post_into_a_get_is_a_failure(status):
    seen: list[bytes] = []

    def answer(head: bytes, _body: bytes, n: int) -> bytes:
        seen.append(head.split(b" ", 2)[0])
        if n == 0:
            return response(status, b"", headers=[("Location", "/elsewhere")], content_type=None)
        return embeddings()

    server = HostileServer(serve_requests(answer))
    try:
        run = Run(pb.EmbeddingsUser, server.url, *BATCH)
        failed, ok = run.one(), run.one()
    finally:
        server.close()
    assert failure_text(failed) == f"redirected to /elsewhere (status {status})"
    assert ok["exception"] is None
    assert seen == [b"POST", b"POST"], "the redirect was not followed with a GET"


@pytest.mark.parametrize("status", [307, 308])
def test_a_redirect_that_keeps_method_and_body_is_followed_as_one_request(status):
    seen: list[tuple[bytes, bytes]] = []

    def answer(head: bytes, body: bytes, n: int) -> bytes:
        seen.append((head.split(b"\r\n", 1)[0], body))
        if n == 0:
            return response(status, b"", headers=[("Location", "/v2/where")], content_type=None)
        return embeddings()

    server = HostileServer(serve_requests(answer))
    try:
        run = Run(pb.EmbeddingsUser, server.url, *BATCH)
        event = run.one()
    finally:
        server.close()
    assert event["exception"] is None, failure_text(event)
    assert [line for line, _ in seen] == [b"POST /v1/embeddings HTTP/1.1", b"POST /v2/where HTTP/1.1"]
    assert seen[0][1] == seen[1][1] and seen[1][1], "the same body went to the new location"
    assert len(run.events) == 1


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        ("/again", "redirected more than 5 times (307/308)"),
        ("ftp://127.0.0.1/x", "redirected to a URL that is not http(s): refusing to follow redirect to 'ftp' URL"),
    ],
)
def test_an_endless_chain_of_307s_or_one_to_another_scheme_is_one_failure(location, expected):
    loop: Responder = lambda *_: response(307, b"", headers=[("Location", location)], content_type=None)  # noqa: E731
    server = HostileServer(serve_requests(loop))
    try:
        event = Run(pb.EmbeddingsUser, server.url, *BATCH, "--request-timeout", "3").one()
    finally:
        server.close()
    assert failure_text(event) == expected


def test_a_307_to_another_origin_leaves_the_api_key_behind():
    """The key is sent to --host; a redirect to another origin (another host or port) gets the request without it."""
    heads: list[bytes] = []

    def record(head: bytes, _body: bytes, _n: int) -> bytes:
        heads.append(head.lower())
        return embeddings()

    other = HostileServer(serve_requests(record))
    moved = f"http://localhost:{other.port}/v1/embeddings"  # another host name: another origin

    def redirect(head: bytes, _body: bytes, _n: int) -> bytes:
        heads.append(head.lower())
        return response(307, b"", headers=[("Location", moved)], content_type=None)

    server = HostileServer(serve_requests(redirect))
    try:
        event = Run(pb.EmbeddingsUser, server.url, *BATCH, "--api-key", SECRET).one()
    finally:
        server.close()
        other.close()
    assert event["exception"] is None, failure_text(event)
    assert len(heads) == 2 and heads[1].startswith(b"post /v1/embeddings"), heads
    assert f"authorization: bearer {SECRET.lower()}".encode() in heads[0]
    assert b"authorization" not in heads[1]


# ---- 18.1: where the API key goes ------------------------------------------------------------------


def test_openai_api_key_from_the_environment_is_sent_only_when_asked(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    heads: list[bytes] = []

    def answer(head: bytes, _body: bytes, _n: int) -> bytes:
        heads.append(head.lower())
        return embeddings()

    server = HostileServer(serve_requests(answer))
    try:
        Run(pb.EmbeddingsUser, server.url, *BATCH).one()
        Run(pb.EmbeddingsUser, server.url, *BATCH, "--api-key-from-env").one()
    finally:
        server.close()
    assert b"authorization" not in heads[0]
    assert f"authorization: bearer {SECRET.lower()}".encode() in heads[1]


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("http://10.1.2.3:8000", False),
        ("http://vllm.internal:8000", False),
        ("http://localhost:8000", True),
        ("http://127.0.0.1:8000", True),
        ("http://[::1]:8000", True),
        ("https://vllm.internal", True),
    ],
)
def test_a_key_never_goes_over_plain_http_to_another_machine_unless_allowed(host, allowed):
    given = options("--api-key", SECRET, "--host", host)
    if allowed:
        assert plan_for(pb.EmbeddingsUser, given, host).headers["Authorization"] == f"Bearer {SECRET}"
        return
    with pytest.raises(OptionError, match=r"^--api-key: refusing to send the API key over plain http to "):
        plan_for(pb.EmbeddingsUser, given, host)
    forced = options("--api-key", SECRET, "--host", host, "--api-key-over-http")
    assert plan_for(pb.EmbeddingsUser, forced, host).headers["Authorization"] == f"Bearer {SECRET}"


def test_the_refusal_stops_the_run_at_start_with_one_line_and_no_key():
    from locust.env import Environment

    env = Environment(
        user_classes=[pb.EmbeddingsUser], parsed_options=options("--api-key", SECRET, "--host", "http://10.9.9.9")
    )
    line = configuration_error(env)
    assert line is not None and line.startswith("--api-key: refusing") and SECRET not in line


# ---- 11.8b: TLS ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    directory = tmp_path_factory.mktemp("certs")
    return {
        "other": make_cert(directory, "other.example", "DNS:other.example"),
        "loopback": make_cert(directory, "loopback", "IP:127.0.0.1"),
    }


def tls_server(cert: Path, key: Path) -> HostileServer:
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return HostileServer(serve_requests(lambda *_: embeddings()), ssl_context=context)


@pytest.mark.parametrize(
    ("cert", "args", "expected"),
    [
        ("other", [], ""),  # Locust's default: not verified
        ("other", ["--tls-verify"], "TLS error: certificate verify failed: self-signed certificate"),
        ("other", ["--ca-bundle", "{other}"], "TLS error: certificate verify failed: IP address mismatch"),
        ("loopback", ["--tls-verify"], "TLS error: certificate verify failed: self-signed certificate"),
        ("loopback", ["--ca-bundle", "{loopback}"], ""),
    ],
    ids=["default", "verify-self-signed", "bundle-other-name", "verify-no-ca", "bundle-right-name"],
)
def test_tls_verification(certs, cert, args, expected):
    server = tls_server(*certs[cert])
    args = [a.format(**{k: v[0] for k, v in certs.items()}) for a in args]
    try:
        event = Run(pb.EmbeddingsUser, server.url, *BATCH, "--request-timeout", "3", *args).one()
    finally:
        server.close()
    message = failure_text(event)
    if expected:
        assert message.startswith(expected), message
    else:
        assert message == ""


def test_a_missing_or_unusable_ca_bundle_stops_at_start(tmp_path):
    with pytest.raises(OptionError, match=r"^--ca-bundle: no such file: /nonexistent.pem$"):
        plan_for(pb.EmbeddingsUser, options("--ca-bundle", "/nonexistent.pem"))
    (junk := tmp_path / "junk.pem").write_text("not a certificate\n")
    with pytest.raises(OptionError, match=r"^--ca-bundle: .*junk.pem holds no usable CA certificates"):
        plan_for(pb.EmbeddingsUser, options("--ca-bundle", str(junk)))
