"""Tokens come from where they really are, and add up to what the server counted."""

from __future__ import annotations

import orjson
import pytest

import poolbench_locust as pb
from tests.support.harness import Run, failure_text

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
