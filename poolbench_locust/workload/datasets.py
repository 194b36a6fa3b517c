"""Where the inputs come from: random text of a given length, or a file of the user's (a table, a
Hugging Face dataset: workload/corpus.py; a timestamped trace: workload/trace.py).

A bad file stops the run at start with the file, the line and the field named, as an OptionError
of --dataset, so that nothing is learned about a broken dataset in the middle of a test.
"""

from __future__ import annotations

import csv
import random
from pathlib import Path
from typing import Protocol

import orjson

from poolbench_locust.endpoints.spec import Inputs, Shape
from poolbench_locust.options import OptionError, Settings
from poolbench_locust.workload import cache_inputs, chat_batches, corpus, images
from poolbench_locust.workload.input_lengths import CUTS
from poolbench_locust.workload.records import fail as _fail
from poolbench_locust.workload.records import lines_of, record_inputs, text_field
from poolbench_locust.workload.tokens import TokenCounter

VOCABULARY = (
    "the of and to in is that for it as with was on be by this are from at or an have not which but "
    "vector model server token batch query document search answer score rank embed latency memory "
    "river mountain window garden yellow silver quiet rapid ancient modern simple careful bright "
    "north south east west winter summer spring autumn morning evening little large small great"
).split()
"""Common English words: most tokenizers give each of them one token."""


class Dataset(Protocol):
    def draw(self, rng: random.Random) -> Inputs: ...

    def size_hint(self) -> int:
        """How many distinct requests are worth preparing."""
        ...


FIT_ROUNDS = 64
"""Counts one text may take to reach its length; each round moves it closer, so this is far more than needed."""


class LengthFitter:
    """Builds random texts of exactly N tokens as a counter counts them (words, a tokenizer, or /tokenize).

    What it learns of the counter once: the special tokens every text gets (`[CLS] ... [SEP]`), the
    words of VOCABULARY that are one token, and the most tokens any of them takes. A text starts as
    random words, is cut when it is too long and is topped up with one-token words when too short.
    Cutting removes whole words, topping up adds exactly the tokens missing, so the length converges
    whatever the tokenizer splits, where nudging by the gap alone oscillates on two-token words.
    """

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self.overhead = counter.count("")
        widths = {word: counter.count(word) - self.overhead for word in VOCABULARY}
        self.fillers = [word for word, width in widths.items() if width == 1]
        self.widest = max(1, *widths.values())
        if not self.fillers:
            raise OptionError("--input-len", "this tokenizer splits every word of the built-in vocabulary")

    def prefix(self, tokens: int, seed: int) -> tuple[str, ...]:
        """--shared-prefix-tokens: `tokens` words that are one token each, the same for every input of a seed."""
        return tuple(random.Random(f"shared-prefix:{seed}").choices(self.fillers, k=tokens))

    def text(self, rng: random.Random, length: int, prefix: tuple[str, ...] = ()) -> str:
        """A text of exactly `length` tokens; with `prefix`, it begins with those words (never cut)."""
        if length <= self.overhead + len(prefix):
            flag = "--shared-prefix-tokens" if prefix else "--input-len"
            raise OptionError(
                flag,
                f"{length} tokens cannot hold a text: this tokenizer adds {self.overhead} special tokens to each"
                + (f", and the shared prefix is {len(prefix)} tokens" if prefix else ""),
            )
        words = [*prefix, *rng.choices(VOCABULARY, k=length - self.overhead - len(prefix))]
        topped_up = one_at_a_time = False
        for _ in range(FIT_ROUNDS):
            text = " ".join(words)
            gap = length - self.counter.count(text)
            if gap == 0:
                return text
            if gap < 0:
                # each word is at most `widest` tokens, so this many words are at most the excess; the prefix stays
                cut = min(max(1, -gap // self.widest), len(words) - len(prefix))
                if cut <= 0:
                    break
                words = words[:-cut]
                # fillers that came out longer in context than alone: from now on add them one by one
                one_at_a_time = topped_up
            else:
                words += rng.choices(self.fillers, k=1 if one_at_a_time else gap)
                topped_up = True
        flag = "--shared-prefix-tokens" if prefix else "--input-len"
        raise OptionError(flag, f"cannot build a text of exactly {length} tokens with this tokenizer")


class RandomDataset:
    def __init__(self, settings: Settings, shape: Shape, counter: TokenCounter) -> None:
        self.settings, self.shape = settings, shape
        self.fitter = LengthFitter(counter)
        # /tokenize tells the model's context length with its first count (the fitter's): when even the
        # shortest input cannot fit, every request would fail with HTTP 400, so it stops the run now. A span
        # only partly above it is the start check's to count and warn of (serverlimits/limits_check.py), and
        # an input the server is asked to cut (--truncate end/start) fits whatever its length.
        limit = getattr(counter, "max_model_len", None)
        if limit is not None and settings.input_len.lo > limit and settings.truncate not in CUTS:
            raise OptionError(
                "--input-len",
                f"{settings.input_len} tokens do not fit the model's context of {limit} tokens (max_model_len)",
            )
        self.prefix = self.fitter.prefix(settings.shared_prefix_tokens, settings.seed)
        """--shared-prefix-tokens: the words every input (every query of rerank and score) begins with."""

    def _text(self, rng: random.Random, prefix: tuple[str, ...] = ()) -> str:
        return self.fitter.text(rng, self.settings.input_len.draw(rng), prefix)

    def draw(self, rng: random.Random) -> Inputs:
        if self.shape == "pairs":  # a cross-encoder's prompt is the query, then the document: the query is shared
            documents = self.settings.documents.draw(rng)
            query = self._text(rng, self.prefix)
            return Inputs(tuple(self._text(rng) for _ in range(documents)), query=query)
        texts = tuple(self._text(rng, self.prefix) for _ in range(self.settings.batch_size.draw(rng)))
        if self.shape == "chat":  # each text one conversation of one user message
            return chat_batches.batch([Inputs((text,)) for text in texts], self.settings)
        return Inputs(texts)

    def size_hint(self) -> int:
        return 32


class FileDataset:
    """Records of a file, taken in order (so a seed repeats a run exactly), wrapping at the end.

    With --shared-prefix-tokens, each record's text (a query of rerank and score, a chat's first message) gets
    the same words prepended: its length is its own plus the prefix's, counted by the client as sent."""

    def __init__(self, records: list[Inputs], settings: Settings, shape: Shape, counter: TokenCounter) -> None:
        self.records, self.settings, self.shape = records, settings, shape
        self._cursor = 0
        self.prefix = ""
        if settings.shared_prefix_tokens:
            words = LengthFitter(counter).prefix(settings.shared_prefix_tokens, settings.seed)
            self.prefix = " ".join(words) + " "

    def _next(self) -> Inputs:
        record = self.records[self._cursor % len(self.records)]
        self._cursor += 1
        return cache_inputs.prefixed(record, self.shape, self.prefix) if self.prefix else record

    def draw(self, rng: random.Random) -> Inputs:
        if self.shape == "pairs":
            return self._next()
        batch = self.settings.batch_size.draw(rng)
        records = [self._next() for _ in range(batch)]
        if self.shape == "chat":
            return chat_batches.batch(records, self.settings)
        texts = tuple(r.texts[0] for r in records)
        if not any(r.images for r in records):
            return Inputs(texts)
        return Inputs(texts, images=tuple(r.images[0] if r.images else () for r in records))

    def size_hint(self) -> int:
        per_request = 1 if self.shape == "pairs" else max(self.settings.batch_size.lo, 1)
        return min(max(32, -(-len(self.records) // per_request)), MOST_REQUESTS)


def _csv_records(path: Path, shape: Shape, limit: int) -> list[Inputs]:
    needed = {"texts": ["text"], "pairs": ["query", "document"]}.get(shape)
    if needed is None:
        raise _fail(str(path), "chat datasets must be .jsonl with a 'messages' field")
    try:
        with path.open(newline="", encoding="utf-8") as f:  # streamed: read as far as the pool goes
            return _csv_rows(csv.DictReader(f), path, needed, limit)
    except UnicodeDecodeError:
        _decode(path)  # names the line
        raise


def _csv_rows(reader: csv.DictReader[str], path: Path, needed: list[str], limit: int) -> list[Inputs]:
    missing = [f for f in needed if f not in (reader.fieldnames or [])]
    if missing:
        raise _fail(f"{path}:1", f"header has no column {missing[0]!r}")
    records: list[Inputs] = []
    query = ""
    documents: list[str] = []
    for line, row in enumerate(reader, start=2):
        fields = {f: text_field(row, f, f"{path}:{line}") for f in needed}
        if "text" in fields:
            records.append(Inputs((fields["text"],)))
        else:  # consecutive rows with the same query are one query with its documents
            if fields["query"] != query and documents:
                records.append(Inputs(tuple(documents), query=query))
                documents = []
            query = fields["query"]
            documents.append(fields["document"])
        if len(records) >= limit:
            return records
    if documents:
        records.append(Inputs(tuple(documents), query=query))
    return records


def _decode(path: Path) -> str:
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise _fail(f"{path}:{line}", "not UTF-8 text") from None


MOST_REQUESTS = 10_000
"""The most distinct requests a pool prepares from a file (FileDataset.size_hint)."""


def records_wanted(settings: Settings, shape: Shape) -> int:
    """Records a pool can use at most: reading stops there, so a corpus of any size costs the same memory."""
    return MOST_REQUESTS * (1 if shape == "pairs" else settings.batch_size.hi)


def _jsonl_records(path: Path, shape: Shape, limit: int, column: str | None) -> list[Inputs]:
    records = []
    held = 0
    for number, line in lines_of(path):
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            raise _fail(f"{path}:{number}", f"not JSON: {e}") from None
        records.append(record_inputs(record, shape, f"{path}:{number}", column or "text", path.parent))
        held += images.inline_bytes(records[-1])
        if len(records) >= limit or held >= images.DATASET_IMAGE_BYTES:
            break
    return records


def _txt_records(path: Path, shape: Shape, limit: int) -> list[Inputs]:
    if shape == "pairs":
        raise _fail(str(path), "rerank/score datasets need .jsonl (query, documents) or .csv (query, document)")
    records = []
    for _, line in lines_of(path):
        texts = (line,)
        records.append(
            Inputs(texts, messages=({"role": "user", "content": line},)) if shape == "chat" else Inputs(texts)
        )
        if len(records) >= limit:
            break
    return records


def _folder_records(path: Path, shape: Shape, limit: int) -> list[Inputs]:
    """A folder of PNG and JPEG files: each an input of one image alone (a chat of one user message)."""
    if shape == "pairs":
        raise _fail(str(path), "a folder of images has no queries: rerank/score need .jsonl (query, documents)")
    return [Inputs(("",), images=((url,),)) for url in images.folder_images(path, limit)]


def load_file(path_text: str, shape: Shape, limit: int = MOST_REQUESTS, column: str | None = None) -> list[Inputs]:
    """The first `limit` records of a file (or of a `datasets` save_to_disk directory), checked."""
    path = Path(path_text)
    if path.is_dir() and images.is_image_folder(path):
        records = _folder_records(path, shape, limit)
    elif path.is_dir():
        records = corpus.saved_records(path, shape, column, limit)
    elif not path.is_file():
        raise _fail(str(path), "no such file")
    else:
        suffix = path.suffix.lower()
        if column is not None and suffix not in (".jsonl", ".parquet"):
            raise OptionError(
                "--dataset-column", f"names a field of a .jsonl, .parquet or saved dataset, not of {path}"
            )
        if suffix == ".txt":
            records = _txt_records(path, shape, limit)
        elif suffix == ".jsonl":
            records = _jsonl_records(path, shape, limit, column)
        elif suffix == ".csv":
            records = _csv_records(path, shape, limit)
        elif suffix == ".parquet":
            records = corpus.parquet_records(path, shape, column, limit)
        else:
            raise _fail(str(path), "must end in .txt, .jsonl, .csv or .parquet, or be a save_to_disk directory")
    if not records:
        raise _fail(str(path), "holds no inputs")
    return records
