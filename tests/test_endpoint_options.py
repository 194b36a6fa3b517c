"""Every User class either sends each option it is given or stops the run at start naming it: an
option silently dropped measures something else than was asked (issue 16: Infinity answered float32
to a client decoding float16, and --check-vectors blamed the server for NaN)."""

from __future__ import annotations

import orjson
import pytest

from poolbench_locust import users
from poolbench_locust.engine.plan import plan_for
from poolbench_locust.engine.user import EndpointUser
from tests.support.harness import options, start_error
from tests.support.locust_run import run_locust

CLASSES = [c for c in vars(users).values() if isinstance(c, type) and issubclass(c, EndpointUser) and not c.abstract]
EMBEDDERS = {
    "EmbeddingsUser",
    "EmbeddingsChatUser",
    "PoolingUser",
    "CohereEmbedUser",
    "InfinityEmbeddingsUser",
    "TEIEmbedUser",
}
"""The classes whose answers are embeddings: --dimensions, --embed-dtype and --endianness are theirs to honour."""

# option -> (arguments, how the value shows in the request body)
ASKED = {
    "--model": (["--model", "m-7"], "m-7"),
    "--dimensions": (["--dimensions", "96"], 96),
    "--embed-dtype": (["--encoding-format", "base64", "--embed-dtype", "float16"], "float16"),
    "--endianness": (["--encoding-format", "base64", "--endianness", "big"], "big"),
}


def _values(doc: object) -> list[object]:
    if isinstance(doc, dict):
        return [v for value in doc.values() for v in [value, *_values(value)]]
    if isinstance(doc, list):
        return [v for value in doc for v in _values(value)]
    return []


@pytest.mark.parametrize("user_class", CLASSES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("option", list(ASKED))
def test_an_option_is_sent_or_refused_at_start(user_class: type[EndpointUser], option: str) -> None:
    args, shown = ASKED[option]
    if option != "--model" and user_class.__name__ not in EMBEDDERS:
        pytest.skip("not an embedding: the option is for the other classes of a mixed locustfile")
    error = start_error(user_class, *args)
    if error is not None:
        named, _, why = error.partition(": ")  # the option itself, or the encoding it needs
        assert named in (option, args[0]) and why.startswith(f"{user_class.__name__} ("), error
        assert "\n" not in error
        return
    plan = plan_for(type(user_class.__name__, (user_class,), {}), options(*args))
    body = orjson.loads(plan.requests[0].body)
    assert shown in _values(body), f"{user_class.__name__} accepted {option} and did not send it: {body}"


@pytest.mark.parametrize(
    ("user_class", "args", "line"),
    [
        (
            users.InfinityEmbeddingsUser,
            ["--encoding-format", "base64", "--embed-dtype", "float16"],
            "--embed-dtype: InfinityEmbeddingsUser (/embeddings) cannot honour --embed-dtype float16: "
            "Infinity's base64 is float32 only",
        ),
        (
            users.InfinityEmbeddingsUser,
            ["--encoding-format", "base64", "--endianness", "big"],
            "--endianness: InfinityEmbeddingsUser (/embeddings) cannot honour --endianness big",
        ),
        (
            users.InfinityRerankUser,
            ["--count-tokens-with-server"],
            "--count-tokens-with-server: InfinityRerankUser (/rerank) cannot honour --count-tokens-with-server: "
            "Infinity has no /tokenize route",
        ),
        (users.TEIEmbedUser, ["--model", "bge"], "--model: TEIEmbedUser (/embed) cannot honour --model bge"),
        (users.TEIRerankUser, ["--count-tokens-with-server"], "--count-tokens-with-server: TEIRerankUser (/rerank)"),
        (users.EmbeddingsUser, ["--embed-dtype", "float16"], "--embed-dtype: applies to base64, bytes and bytes_only"),
        (users.PoolingUser, ["--endianness", "little"], "--endianness: applies to base64, bytes and bytes_only"),
    ],
    ids=lambda v: getattr(v, "__name__", None) or (v[-1] if isinstance(v, list) else None),
)
def test_an_option_the_endpoint_cannot_honour_is_one_line(user_class: type, args: list[str], line: str) -> None:
    error = start_error(user_class, *args)
    assert error is not None and error.startswith(line), error


def test_the_options_an_endpoint_honours_still_start() -> None:
    assert start_error(users.InfinityEmbeddingsUser, "--encoding-format", "base64", "--dimensions", "64") is None
    assert start_error(users.EmbeddingsUser, "--encoding-format", "bytes", "--embed-dtype", "float16") is None
    assert start_error(users.TEIEmbedUser, "--dimensions", "64") is None


def test_infinity_with_a_dtype_it_cannot_send_stops_the_run_at_start() -> None:
    result = run_locust(
        "locustfiles/infinity.py",
        *("--encoding-format", "base64", "--embed-dtype", "float16", "--check-vectors"),
        "InfinityEmbeddingsUser",  # the locustfile's other classes answer float only: the first line would be theirs
        run_time="5s",
        host="http://127.0.0.1:9",
    )
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "--embed-dtype: InfinityEmbeddingsUser (/embeddings) cannot honour" in errors[0]
    assert "Traceback" not in result.stderr
