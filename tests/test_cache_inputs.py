"""Inputs that provoke a server's caches (workload/cache_inputs.py): --repeat-ratio's copies of earlier inputs in
each request pool, --shared-prefix-tokens' prefix every input begins with, and the start checks of both.

Every test here builds a plan (plan_for) and reads its prepared requests: no process is started."""

from __future__ import annotations

import argparse

import orjson
import pytest

import poolbench_locust as pb
from poolbench_locust.engine.plan import Plan, plan_for
from poolbench_locust.options.settings import options_error
from poolbench_locust.wire import count_words
from tests.support.harness import options, start_error
from tests.support.tokenizers import write_tokenizer


def plan(user_class: type, *args: str) -> Plan:
    """A plan built anew (a User class of its own: no cached plan)."""
    return plan_for(type(user_class.__name__, (user_class,), {}), options(*args))


def bodies(p: Plan) -> list[dict]:
    return [orjson.loads(r.body) for r in p.requests]


def repeated_share(requests: list[list[object]]) -> tuple[int, int]:
    """(inputs that are copies of an input an earlier request carries, all inputs)."""
    earlier: set[object] = set()
    repeats = total = 0
    for inputs in requests:
        repeats += sum(1 for i in inputs if i in earlier)
        total += len(inputs)
        earlier.update(inputs)
    return repeats, total


@pytest.mark.parametrize("ratio", ["0.1", "0.3", "0.75", "0.95"])
def test_a_share_of_the_inputs_are_copies_of_earlier_ones_and_the_shape_and_counts_stay(ratio):
    args = ("--batch-size", "1:6", "--input-len", "6:20", "--seed", "4")
    base, repeated = plan(pb.EmbeddingsUser, *args), plan(pb.EmbeddingsUser, *args, "--repeat-ratio", ratio)
    batches = [b["input"] for b in bodies(repeated)]
    repeats, total = repeated_share(batches)
    # the pool's share is the ratio to within one request's inputs (the first request has nothing to copy)
    assert abs(repeats / total - float(ratio)) <= 6 / total, (repeats, total)
    assert repeats == round(float(ratio) * total)  # made up by the pool's end
    # the same batch sizes, request by request; the lengths drawn as before; counts exact
    assert [len(b) for b in batches] == [len(b["input"]) for b in bodies(base)]
    assert {count_words(t) for b in batches for t in b} <= set(range(6, 21))
    assert [r.client_tokens for r in repeated.requests] == [sum(map(count_words, b)) for b in batches]
    assert [r.sequences for r in repeated.requests] == [len(b) for b in batches]
    # without repeats, the random inputs are all distinct: the copies are the option's
    assert repeated_share([b["input"] for b in bodies(base)])[0] == 0


def test_repeats_are_the_same_under_a_seed_and_others_under_another():
    def pool(seed: str) -> list[bytes]:
        return [
            r.body
            for r in plan(pb.EmbeddingsUser, "--repeat-ratio", "0.5", "--batch-size", "3", "--seed", seed).requests
        ]

    assert pool("7") == pool("7")
    assert pool("7") != pool("8")


@pytest.mark.parametrize(
    ("user_class", "ratio"), [(pb.RerankUser, "0.4"), (pb.ScoreUser, "0.4"), (pb.RerankUser, "0.9")]
)
def test_a_rerank_repeat_is_a_query_and_document_pair_seen_before(user_class, ratio):
    args = ("--documents", "1:5", "--input-len", "5:9", "--seed", "2", "--repeat-ratio", ratio)
    p = plan(user_class, *args)
    base = plan(user_class, *args[:-2])
    pairs, counts = [], []
    for body, base_body in zip(bodies(p), bodies(base), strict=True):
        query = body.get("query", body.get("text_1"))
        documents = body.get("documents", body.get("text_2"))
        pairs.append([(query, d) for d in documents])
        counts.append(len(documents))
        assert len(documents) == len(base_body.get("documents", base_body.get("text_2")))
    repeats, total = repeated_share(pairs)
    assert abs(repeats / total - float(ratio)) <= 5 / total, (repeats, total)
    assert repeats == round(float(ratio) * total)  # made up by the pool's end, even from requests of one document
    tokens = [sum(count_words(q) + count_words(d) for q, d in request) for request in pairs]
    assert [r.client_tokens for r in p.requests] == tokens
    assert [r.sequences for r in p.requests] == counts


def test_a_chat_repeat_is_a_whole_conversation():
    p = plan(pb.EmbeddingsChatUser, "--repeat-ratio", "0.5", "--input-len", "8")
    conversations = [[orjson.dumps(b["messages"])] for b in bodies(p)]
    repeats, total = repeated_share(conversations)
    assert repeats == total // 2
    batched = plan(pb.EmbeddingsChatUser, "--repeat-ratio", "0.25", "--batch-size", "4", "--input-len", "8")
    conversations = [[orjson.dumps(c) for c in b["messages"]] for b in bodies(batched)]
    assert all(len(c) == 4 for c in conversations)
    repeats, total = repeated_share(conversations)
    assert repeats == round(0.25 * total)


def test_every_input_begins_with_the_same_tokens_and_keeps_its_length():
    p = plan(pb.EmbeddingsUser, "--shared-prefix-tokens", "5", "--input-len", "8:16", "--batch-size", "3")
    texts = [t for b in bodies(p) for t in b["input"]]
    assert len({tuple(t.split()[:5]) for t in texts}) == 1
    assert len({tuple(t.split()[5:]) for t in texts}) == len(texts)  # only the prefix is shared
    assert {count_words(t) for t in texts} <= set(range(8, 17)) and len({count_words(t) for t in texts}) > 3
    assert [r.client_tokens for r in p.requests] == [sum(map(count_words, b["input"])) for b in bodies(p)]
    # the same seed, the same prefix; another seed, another
    again = plan(pb.EmbeddingsUser, "--shared-prefix-tokens", "5", "--input-len", "8:16", "--batch-size", "3")
    other = plan(pb.EmbeddingsUser, "--shared-prefix-tokens", "5", "--input-len", "8:16", "--seed", "1")
    assert bodies(again)[0]["input"][0].split()[:5] == texts[0].split()[:5]
    assert bodies(other)[0]["input"][0].split()[:5] != texts[0].split()[:5]


def test_rerank_shares_its_queries_prefix_not_its_documents():
    p = plan(pb.RerankUser, "--shared-prefix-tokens", "3", "--input-len", "6", "--documents", "4")
    queries = [b["query"] for b in bodies(p)]
    documents = [d for b in bodies(p) for d in b["documents"]]
    assert len({tuple(q.split()[:3]) for q in queries}) == 1
    assert len({tuple(d.split()[:3]) for d in documents}) > 1
    assert {count_words(t) for t in (*queries, *documents)} == {6}


def test_a_shared_prefix_with_a_tokenizer_is_that_many_tokens_of_an_exact_length(tmp_path):
    from tokenizers import Tokenizer

    path = write_tokenizer(tmp_path / "tokenizer.json")
    p = plan(pb.EmbeddingsUser, "--tokenizer", str(path), "--input-len", "12", "--shared-prefix-tokens", "4")
    tokenizer = Tokenizer.from_file(str(path))
    ids = [tokenizer.encode(t).ids for b in bodies(p) for t in b["input"]]
    assert {len(i) for i in ids} == {12}
    assert len({tuple(i[1:5]) for i in ids}) == 1  # after [CLS]
    # [CLS] and [SEP] leave 10 tokens: a prefix of 10 leaves none for the input's own
    error = start_error(
        pb.EmbeddingsUser, "--tokenizer", str(path), "--input-len", "12", "--shared-prefix-tokens", "10"
    )
    assert error is not None and error.startswith("--shared-prefix-tokens:"), error


def test_a_datasets_texts_get_the_prefix_prepended(tmp_path):
    data = tmp_path / "inputs.jsonl"
    data.write_text('{"text": "first text"}\n{"text": "a second one"}\n')
    p = plan(pb.EmbeddingsUser, "--dataset", f"file:{data}", "--shared-prefix-tokens", "3")
    texts = [t for b in bodies(p) for t in b["input"]]
    prefix = texts[0].split()[:3]
    assert {" ".join(t.split()[3:]) for t in texts} == {"first text", "a second one"}
    assert all(t.split()[:3] == prefix for t in texts)
    assert [r.client_tokens for r in p.requests] == [sum(map(count_words, b["input"])) for b in bodies(p)]
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"query": "q w", "documents": ["a b", "c d e"]}\n')
    (body, *_) = bodies(plan(pb.RerankUser, "--dataset", f"file:{pairs}", "--shared-prefix-tokens", "2"))
    assert body["query"].split()[2:] == ["q", "w"] and body["documents"] == ["a b", "c d e"]
    chat = tmp_path / "chat.jsonl"
    chat.write_text('{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]}\n')
    p = plan(pb.EmbeddingsChatUser, "--dataset", f"file:{chat}", "--shared-prefix-tokens", "2")
    (body, *_) = bodies(p)
    assert [m["content"].split()[2:] for m in body["messages"]] == [["be", "brief"], []]
    assert body["messages"][1]["content"] == "hi" and p.requests[0].client_tokens == 2 + 2 + 1


def test_repeats_and_a_shared_prefix_together():
    p = plan(pb.EmbeddingsUser, "--shared-prefix-tokens", "4", "--repeat-ratio", "0.5", "--batch-size", "2")
    batches = [b["input"] for b in bodies(p)]
    repeats, total = repeated_share(batches)
    assert repeats == total // 2
    assert len({tuple(t.split()[:4]) for b in batches for t in b}) == 1
    assert {count_words(t) for b in batches for t in b} == {128}


@pytest.mark.parametrize(
    ("dest", "value"),
    [("repeat_ratio", "1"), ("repeat_ratio", "-0.1"), ("repeat_ratio", "half"), ("shared_prefix_tokens", "-1")],
)
def test_bad_values_are_refused_naming_the_option(dest, value):
    # as the web form's text reaches Settings (the command line's argparse refuses them with the same words)
    error = options_error(argparse.Namespace(**{**vars(options()), dest: value}))
    flag = "--" + dest.replace("_", "-")
    assert error is not None and error.startswith(f"{flag}:"), error
    with pytest.raises(SystemExit):
        options(flag, value)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (("--shared-prefix-tokens", "128"), "--shared-prefix-tokens"),
        (("--shared-prefix-tokens", "64", "--input-len", "64:256"), "--shared-prefix-tokens"),
    ],
)
def test_bad_values_stop_the_run_at_start_naming_the_option(args, flag):
    error = start_error(pb.EmbeddingsUser, *args)
    assert error is not None and error.startswith(f"{flag}:"), error


def test_a_trace_takes_neither(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"timestamp": 0, "text": "a b c"}\n')
    for flag, value in (("--repeat-ratio", "0.5"), ("--shared-prefix-tokens", "2")):
        error = start_error(pb.EmbeddingsUser, "--dataset", f"trace:{trace}", flag, value)
        assert error is not None and error.startswith(f"{flag}:") and "trace" in error, error
    assert start_error(pb.EmbeddingsUser, "--shared-prefix-tokens", "127", "--repeat-ratio", "0.99") is None
