"""Tokens come from where they really are, and add up to what the server counted."""

from __future__ import annotations

import orjson
import pytest

import poolbench_locust as pb
from poolbench_locust.endpoints.spec import MAX_TOKENS, AnswerError, TokenPaths
from poolbench_locust.options import OptionError, Settings
from tests.support.harness import Run, failure_text, options
from tests.support.locust_run import run_locust

REQUESTS = 5


@pytest.mark.parametrize(
    ("encoding", "source"),
    [("float", "server"), ("base64", "server"), ("bytes", "metadata"), ("bytes_only", "client-estimate")],
)
def test_embedding_tokens_add_up_to_the_mock_count(mock_server, encoding, source):
    run = Run(
        pb.EmbeddingsUser, mock_server.url, "--encoding-format", encoding, "--batch-size", "3", "--input-len", "7"
    )
    mock_server.reset()
    events = [run.one() for _ in range(REQUESTS)]
    assert [failure_text(e) for e in events] == [""] * REQUESTS
    assert {e["context"]["token_source"] for e in events} == {source}
    assert sum(e["context"]["input_tokens"] for e in events) == mock_server.stats()["prompt_tokens"]
    assert sum(e["context"]["sequences"] for e in events) == REQUESTS * 3
    assert sum(e["context"]["input_tokens"] for e in events) == REQUESTS * 3 * 7


ALL_USERS = [
    (pb.EmbeddingsUser, [], "server"),
    (pb.EmbeddingsChatUser, ["--batch-size", "2"], "server"),
    (pb.PoolingUser, ["--encoding-format", "bytes"], "metadata"),
    (pb.RerankUser, [], "server"),
    (pb.RerankUser, ["--endpoint-path", "/v2/rerank"], "server"),
    (pb.ScoreUser, [], "server"),
    (pb.ClassifyUser, ["--batch-size", "2"], "server"),
    (pb.CohereEmbedUser, ["--batch-size", "2"], "server"),
    (pb.InfinityEmbeddingsUser, ["--batch-size", "2"], "server"),
    (pb.InfinityRerankUser, [], "server"),
    (pb.TEIEmbedUser, ["--batch-size", "2"], "server"),
    (pb.TEIRerankUser, [], "server"),
]


@pytest.mark.parametrize(
    ("user_class", "args", "source"), ALL_USERS, ids=[f"{u.__name__}{''.join(a)}" for u, a, _ in ALL_USERS]
)
def test_every_user_class_succeeds_and_counts_like_the_server(mock_server, user_class, args, source):
    run = Run(user_class, mock_server.url, "--input-len", "5", "--documents", "3", *args)
    mock_server.reset()
    events = [run.one() for _ in range(3)]
    assert [failure_text(e) for e in events] == [""] * 3
    assert {e["context"]["token_source"] for e in events} == {source}
    stats = mock_server.stats()
    assert sum(e["context"]["input_tokens"] for e in events) == stats["prompt_tokens"]
    assert sum(e["context"]["sequences"] for e in events) == stats["sequences"]
    assert events[0]["name"] == run.user.plan.route
    assert events[0]["request_type"] == "POST"


def test_tei_server_timings_are_in_the_context(mock_server_factory):
    mock = mock_server_factory("--ttfb-ms", "40")
    event = Run(pb.TEIEmbedUser, mock.url).one()
    assert event["context"]["server_queue_ms"] >= 40
    assert {"server_inference_ms", "server_total_ms", "server_compute_ms"} <= event["context"].keys()


def test_large_metadata_header_is_read(mock_server):
    """On large batches vLLM's metadata header grows to tens of kilobytes: it must not be rejected."""
    run = Run(
        pb.EmbeddingsUser, mock_server.url, "--encoding-format", "bytes", "--batch-size", "512", "--input-len", "1"
    )
    event = run.one()
    assert event["exception"] is None, failure_text(event)
    assert event["context"]["input_tokens"] == 512


def write_wordpiece(directory, pad_to: int | None = 128):
    """A BERT-like WordPiece tokenizer.json as embedding models ship it: [CLS] ... [SEP], some common
    words split into two pieces, and (like all-MiniLM-L6-v2's) padding and truncation to 128."""
    tokenizers = pytest.importorskip("tokenizers")
    from poolbench_locust.workload.datasets import VOCABULARY

    split = {w: (w[:3], "##" + w[3:]) for w in VOCABULARY if len(w) > 6}  # "mountain" -> "mou", "##ntain"
    pieces = [p for w in VOCABULARY for p in split.get(w, (w,))]
    vocab = {w: i for i, w in enumerate(dict.fromkeys(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *pieces]))}
    tok = tokenizers.Tokenizer(tokenizers.models.WordPiece(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    tok.post_processor = tokenizers.processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])]
    )
    if pad_to:
        tok.enable_padding(length=pad_to, pad_id=0, pad_token="[PAD]")
        tok.enable_truncation(max_length=pad_to)
    directory.mkdir(exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    return directory


@pytest.mark.parametrize("pad_to", [128, None])
def test_exact_lengths_with_a_wordpiece_tokenizer_that_pads_and_splits_words(tmp_path, pad_to):
    """Issue 16.1 and 12.4: the file's own padding is turned off, and two-token words do not make
    the fitting oscillate; --tokenizer takes the model's directory."""
    from tokenizers import Tokenizer

    from poolbench_locust.engine.plan import plan_for
    from tests.support.harness import options

    model = write_wordpiece(tmp_path / "model", pad_to)
    plain = Tokenizer.from_file(str(model / "tokenizer.json"))
    plain.no_padding()
    plain.no_truncation()
    for length in (3, 16, 64, 100, 127, 300):
        user = type("U", (pb.EmbeddingsUser,), {})
        plan = plan_for(user, options("--tokenizer", str(model), "--input-len", str(length), "--batch-size", "2"))
        texts = [t for r in plan.requests for t in orjson.loads(r.body)["input"]]
        assert {len(plain.encode(t).ids) for t in texts} == {length}
        assert {r.client_tokens for r in plan.requests} == {2 * length}


def test_a_length_below_the_special_tokens_stops_with_a_clear_line(tmp_path):
    from poolbench_locust.engine.plan import plan_for
    from poolbench_locust.options import OptionError
    from tests.support.harness import options

    model = write_wordpiece(tmp_path / "model")
    with pytest.raises(OptionError, match="2 tokens cannot hold a text: this tokenizer adds 2 special tokens"):
        plan_for(pb.EmbeddingsUser, options("--tokenizer", str(model), "--input-len", "2"))
    with pytest.raises(OptionError, match=r"holds no tokenizer\.json"):
        plan_for(pb.EmbeddingsUser, options("--tokenizer", str(tmp_path)))


# ---- answers without the count we look for first: Cohere's and Voyage's (issue 30) -----------------

UNCOUNTED_WARNING = "RerankUser (/v2/rerank): the server's answers carry no token count"
COHERE_LOOKED_FOR = (
    "usage.prompt_tokens, usage.total_tokens, meta.tokens.input_tokens, meta.billed_units.input_tokens, "
    "the x-compute-tokens header"
)

ELSEWHERE = [
    # (User class, options, the mock's flavor, token source): each answer valid, its count elsewhere or nowhere
    (pb.RerankUser, ["--endpoint-path", "/v2/rerank"], "cohere", "client-estimate"),  # only search_units
    (pb.RerankUser, ["--endpoint-path", "/v1/rerank"], "voyage", "server"),  # data, usage.total_tokens
    (pb.EmbeddingsUser, ["--batch-size", "3"], "voyage", "server"),  # usage.total_tokens
    (pb.EmbeddingsUser, ["--batch-size", "8", "--dimensions", "1024"], "voyage", "server"),  # 86 kB: lazyjson's
]


@pytest.mark.parametrize(
    ("user_class", "args", "flavor", "source"),
    ELSEWHERE,
    ids=[f"{u.__name__}-{f}{''.join(a)}" for u, a, f, _ in ELSEWHERE],
)
def test_a_valid_answer_with_its_count_elsewhere_or_nowhere_succeeds(mock_server, user_class, args, flavor, source):
    run = Run(
        user_class,
        mock_server.url,
        "--input-len",
        "5",
        "--documents",
        "3",
        *args,
        mock_headers={"x-mock-flavor": flavor},
    )
    mock_server.reset()
    events = [run.one() for _ in range(3)]
    assert [failure_text(e) for e in events] == [""] * 3
    assert {e["context"]["token_source"] for e in events} == {source}
    # The client's word count and the mock's are the same rule: either way the sum is the mock's.
    assert sum(e["context"]["input_tokens"] for e in events) == mock_server.stats()["prompt_tokens"]


def test_require_server_tokens_fails_an_answer_without_a_count_naming_where_it_looked(mock_server):
    args = ["--endpoint-path", "/v2/rerank", "--require-server-tokens"]
    event = Run(pb.RerankUser, mock_server.url, *args, mock_headers={"x-mock-flavor": "cohere"}).one()
    assert failure_text(event) == f"answer has no token count (looked for {COHERE_LOOKED_FOR}); --require-server-tokens"


def test_require_server_tokens_with_bytes_only_stops_at_start():
    with pytest.raises(OptionError, match="--require-server-tokens: a bytes_only answer carries no token count"):
        Settings.from_options(options("--require-server-tokens", "--encoding-format", "bytes_only"))


def test_a_run_without_server_counts_warns_once_naming_the_route_and_its_csv_says_client(mock_server_factory, tmp_path):
    mock = mock_server_factory("--flavor", "cohere")
    result = run_locust(
        "locustfiles/rerank.py",
        *("--endpoint-path", "/v2/rerank", "--documents", "4", "--input-len", "6"),
        host=mock.url,
        users=4,
        requests=20,
        csv=tmp_path / "run",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count(UNCOUNTED_WARNING) == 1, result.stderr[-3000:]
    warning = next(line for line in result.stderr.splitlines() if UNCOUNTED_WARNING in line)
    assert f"(looked for {COHERE_LOOKED_FOR})" in warning and "client's own count (client-estimate)" in warning
    pooling = result.csv("pooling")
    assert pooling["/v2/rerank"]["Token Source"] == pooling["Aggregated"]["Token Source"] == "client-estimate"
    assert int(pooling["Aggregated"]["Input Tokens"]) == mock.stats()["prompt_tokens"] > 0
    assert result.csv()["Aggregated"]["Failure Count"] == "0"


def test_token_paths_are_tried_in_order_and_checked():
    paths = TokenPaths("usage.prompt_tokens", "usage.total_tokens", "[].meta_info.prompt_tokens")
    assert paths.read({"usage": {"prompt_tokens": 3, "total_tokens": 9}}) == 3
    assert paths.read({"usage": {"total_tokens": 9}}) == 9
    assert paths.read({"usage": "none", "meta": {}}) is None
    assert paths.read([{"meta_info": {"prompt_tokens": 4}}, {"meta_info": {"prompt_tokens": 5}}]) == 9
    assert paths.read([{"meta_info": {"prompt_tokens": 4}}, {"index": 1}]) is None, "only where every item has one"
    with pytest.raises(AnswerError, match=r"^usage.total_tokens is negative: -2$"):
        paths.read({"usage": {"total_tokens": -2}})
    with pytest.raises(AnswerError, match=r"^\[\].meta_info.prompt_tokens is implausible"):
        paths.read([{"meta_info": {"prompt_tokens": MAX_TOKENS}}] * 2)
    assert str(paths) == "usage.prompt_tokens, usage.total_tokens, [].meta_info.prompt_tokens"
