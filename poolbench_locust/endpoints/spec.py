"""What an endpoint is: a route, how to build its request body, how to read its answer.

The measuring engine (`poolbench_locust.engine`) knows nothing about any server: an endpoint declares
the form its answers come in (`AnswerForm`: JSON, vLLM's `bytes` and `bytes_only`, KServe's binary
tensors; endpoints/forms.py), and the form reads one answer into a `ParsedAnswer` (its items, vectors or
raw values, token count and where it was found, the server's own timings), which the engine checks and
counts the same way for every server. An endpoint knows nothing about timing or Locust. Adding a server
is adding a few `Endpoint` values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol

from poolbench_locust.lazyjson import ARRAY
from poolbench_locust.options import BY_FLAG, Settings

Server = Literal["vllm", "infinity", "tei", "sglang", "ollama", "nim", "kserve", "cohere", "voyage", "llamacpp"]
"""The server family whose answer forms a route speaks: also the bundled mock's flavor that answers like it."""

Shape = Literal["texts", "pairs", "chat"]
"""What a request carries: a batch of texts, a query with documents, or chat conversations (one, or with
--batch-size above 1 a batch of them: vLLM 0.34)."""


@dataclass(frozen=True, slots=True)
class Inputs:
    texts: tuple[str, ...]
    """The texts to embed/classify, the documents of a query, or the contents of a chat's messages."""
    query: str = ""
    messages: tuple[Mapping[str, Any], ...] = ()
    """A chat conversation as a dataset gave it (roles included); empty for synthetic chats."""
    images: tuple[tuple[str, ...], ...] = ()
    """The images of each text (of each document of a query), as URLs (data: or http(s):); empty: none.
    A text may be empty when its input is images alone (a folder of images). With `conversations`: the images
    of each conversation."""
    conversations: tuple[tuple[Mapping[str, Any], ...], ...] = ()
    """A batch of chat conversations, one embedding each (workload/chat_batches.py); empty: one conversation
    (`messages`, or `texts` as user messages). `texts` then holds the contents of all of them."""


Kind = Literal["vectors", "packed_bits", "sparse", "rows", "scores", "labels"]
"""How a reference input's values are compared (consistency/measures.py; engine/answer_values.py says each)."""


class Values(NamedTuple):
    """A reference input's values as an answer gave them, tagged with their kind: "vectors" (floats, or a
    packed int8/uint8 embedding's numbers), "packed_bits" (binary/ubinary values), "sparse" (id -> value),
    "rows" (a token-level answer's rows), "scores" (in the documents' order), "labels" (label ->
    probability, or the probabilities by class index)."""

    kind: Kind
    data: Any


class Raw(NamedTuple):
    """Raw values of a binary body, as `Values.data` of a binary form: the engine decodes them (engine/vectors.py)
    into a vector, or into rows of `width` values each (a token-level answer)."""

    data: bytes
    dtype: Any
    """As the answer declared it (unchecked: a hostile header's value)."""
    endianness: Any
    width: int | None = None


ValuesOf = Callable[[int, "bytes | None"], Values]
"""(the item's position, or -1 for the whole answer's scores; the whole body where a binary form's was kept,
else None) -> its values. Raises AnswerError or ValueError when the answer holds none there."""


@dataclass(slots=True)
class ParsedAnswer:
    """What an answer's form read of one response, as the engine's checks and counts need it.

    A JSON reader fills the first five fields; the form (endpoints/forms.py) adds where the count came from,
    and a binary form the raw first vector or the token rows' shape it read."""

    items: int
    """Embeddings, results or scores in the answer."""
    prompt_tokens: int | None = None
    """The server's token count of the answer, checked (token_count); None: the answer holds none."""
    vectors: Sequence[Any] = ()
    """Every embedding as the answer gave it (unchecked: any JSON value), for the type, dimension and
    vector checks; empty for answers that hold none (rerank, score, classify) and for binary ones."""
    server_ms: Mapping[str, float] = field(default_factory=dict)
    """The server's own timings the answer carries, in ms, by the request context's key (server_queue_ms,
    server_inference_ms, ...), checked by the reader (`server_duration`): shown beside the client's."""
    image_tokens: int | None = None
    """The server's count of image tokens where its answer gives one apart (Cohere), checked (token_count)."""
    tokens_where: str = "the server's usage"
    """Where `prompt_tokens` was read, in a failure's words."""
    token_source: str = "server"
    """The request context's token_source of `prompt_tokens`: server, metadata (vLLM's `bytes` header), or
    body-size (a token-level raw body's size, engine/token_rows.py)."""
    client_counted: bool = False
    """The form holds no count by its nature (`bytes_only`): the client's own count stands, and is no
    missing count (no warning, no --require-server-tokens failure)."""
    raw: bytes | None = None
    """A binary answer's first vector as raw values (or, token-level, the body's first bytes), for
    --check-vectors; None: none to check."""
    raw_dtype: Any = None
    """The dtype of `raw` as the answer declared it (unchecked: a hostile header's value)."""
    raw_endianness: Any = None
    """The endianness of `raw` as the answer declared it, or None for --endianness."""
    rows: tuple[Sequence[int], int] | None = None
    """A token-level answer's rows per input and their width, where the form read them (vLLM's metadata shapes)."""
    rows_bytes: tuple[str, int] | None = None
    """A token-level answer known only by its size (`bytes_only`): (what its body is called in a failure,
    its bytes: Σ rows x width x dtype bytes)."""
    scores: Callable[[], list[float]] | None = None
    """A rerank's or score's scores in the documents' order, built only when called (the consistency check
    calls it for the few requests that carry a reference; docs/consistency.md); raises AnswerError when the
    answer holds no such scores. None: the reader gives none."""
    values: ValuesOf | None = None
    """The values of one item (or of the whole answer), built only when called, for the consistency check:
    given by the readers whose answers hold what the options alone do not say how to read (labels, sparse,
    a binary body, another server's scores). None: a JSON embedding of `vectors` read under the options,
    or `scores` (engine/answer_values.py)."""


class AnswerError(Exception):
    """The answer is valid JSON but not of the endpoint's shape."""


class TokenPaths:
    """Where a route's answers may hold the server's token count: dotted paths, tried in order; the first
    present is the count, checked by `token_count`. A path that starts with `[].` is read in every item
    of a bare-list answer and summed (SGLang's per-result `meta_info.prompt_tokens`): present only where
    every item holds it. An endpoint declares its own in one line: `tokens=TokenPaths("prompt_eval_count")`.
    """

    __slots__ = ("_paths", "names")

    def __init__(self, *names: str) -> None:
        self.names: tuple[str, ...] = names
        self._paths = tuple(
            (name, tuple(name.removeprefix("[].").split(".")), name.startswith("[].")) for name in names
        )

    def read(self, doc: Any) -> int | None:
        """The first count present in `doc` (AnswerError naming its path when it is not plausible), or None."""
        for name, keys, per_item in self._paths:
            value = _summed(doc, keys, name) if per_item else _at(doc, keys)
            if value is not None:
                return token_count(value, name)
        return None

    def __add__(self, other: TokenPaths) -> TokenPaths:
        return TokenPaths(*self.names, *other.names)

    def __str__(self) -> str:
        return ", ".join(self.names)

    def __repr__(self) -> str:
        return f"TokenPaths{self.names!r}"


def _at(doc: Any, keys: tuple[str, ...]) -> Any:
    # Answers are parsed into dicts (orjson, lazyjson): a dict test is cheaper than Mapping's ABC check.
    for key in keys:
        if type(doc) is not dict:
            return None
        doc = doc.get(key)
    return doc


def _summed(doc: Any, keys: tuple[str, ...], name: str) -> int | None:
    if type(doc) is not list or not doc:
        return None
    total = 0
    for item in doc:
        if (count := token_count(_at(item, keys), name)) is None:
            return None
        total += count  # each at most MAX_TOKENS: the sum is checked below, never huge
    return total


USAGE_TOKENS = TokenPaths("usage.prompt_tokens", "usage.total_tokens")
"""OpenAI's usage; Voyage sends only `total_tokens` (for pooling, all of them are prompt tokens)."""
COHERE_TOKENS = TokenPaths("meta.tokens.input_tokens", "meta.billed_units.input_tokens")
"""Cohere v2's `meta`: `tokens` is optional; its rerank may bill only `search_units`, which are not tokens."""
COHERE_IMAGE_TOKENS = TokenPaths("meta.billed_units.image_tokens")
"""Cohere's count of the image tokens it billed, beside its input_tokens (vLLM's /v2/embed sends none)."""
NO_TOKENS = TokenPaths()
"""A route whose JSON holds no count (TEI: its count comes in the `x-compute-tokens` header)."""


class AnswerForm(Protocol):
    """How one form of a route's answers is read (endpoints/forms.py): the engine reads the body as it says
    (kept whole, or streamed and dropped but for its head), then asks it for the answer. A form is made per
    plan (`Endpoint.forms`), so it may learn from the answers (bytes_only's dimension); what it learns of one
    request it gives back from `head` to `read`, never keeps: other users' requests are read in between."""

    content_type: str
    """The Content-Type every answer of this form has; another is one failed request."""
    untyped_ok: bool
    """An answer with no Content-Type at all is read as this form (KServe's Python server sends its binary
    tensors untyped); False: it is one failed request, as another type is."""
    keeps_body: bool
    """True: the whole body is kept and `read` gets it; False: streamed and dropped, `read` gets its head."""
    head_allowance: int
    """Bytes each input may add to the response's head beyond --max-header-kb (vLLM's metadata item)."""
    head_allowance_why: str
    """What that allowance is, in the failure's words when a head passes it."""
    looked_for: str
    """Where the answers' token count is looked for, in the words of a failure or warning."""
    not_compared: str | None
    """Why these answers give no values to compare with a reference (docs/consistency.md), or None: they do."""

    def head(self, headers: Any, hidden: int | None) -> tuple[int, Any]:
        """(bytes of the body's start to keep, what `read` needs of the headers) of a form that does not keep
        its body; `hidden` is a token-level answer's learned row width, or None. Raises AnswerError when
        the headers already say the answer is bad (its body is still read to its end and counted)."""
        ...

    def read(self, headers: Any, note: Any, body: bytes, size: int, expected: int) -> ParsedAnswer:
        """The answer: `body` is the whole body or its kept head, `size` its whole size after inflating,
        `expected` the items asked for. Raises AnswerError with what was wrong."""
        ...

    def row_probe(self, body: bytes) -> bytes | None:
        """A token-level answer known only by its size (its inputs' rows run together, nothing says their
        width): the request `body` asked again in float JSON, whose answer gives each input's rows and the
        server's count, asked once at start (engine/row_probe.py). None: this form's answers need none."""
        ...


ServerAsk = Callable[[str, float], Any]
"""(path, timeout seconds) -> the JSON document the server answers to a GET of it; raises OSError or
ValueError (with a message) when it cannot. The plan's, bounded in size and time, with its API key."""


@dataclass(frozen=True)
class Endpoint:
    route: str
    """The path; `{model}` in it is --model, URL-quoted (KServe's /v2/models/{model}/infer): --model is
    then required."""
    shape: Shape
    body: Callable[[Inputs, Settings], dict[str, Any] | list[Any]]
    answer: Callable[[Any], ParsedAnswer]
    server: Server = "vllm"
    encodings: frozenset[str] = frozenset({"float"})
    """The `--encoding-format` values this route can answer; bytes/bytes_only mean a binary body."""
    tokens: TokenPaths = USAGE_TOKENS
    """Where the answers hold the server's token count. An answer with none counts the client's own
    count (one warning per route), or fails with --require-server-tokens."""
    vectors: bool = False
    """The answer carries embeddings: a float one is read by lazyjson, its readers see `ARRAY`s, not lists."""
    compared_as: Kind | None = None
    """What the consistency check compares of an answer (its values' kind) where the shape does not say it:
    "labels" (a classifier's probabilities), "sparse"; None: scores for a pairs-shaped route, else vectors.
    --pooling-task and --embedding-type may still change it (values_kind)."""
    embedding_types: frozenset[str] | Callable[[str], frozenset[str]] = frozenset()
    """The --embedding-type values the server answers (engine/packed.py checks those answers), or a function
    of --model that says them (Cohere's API offers more than vLLM's /v2/embed); any other stops the run."""
    routes: tuple[str, ...] = ()
    """Other routes that speak the same request, selectable with --endpoint-path."""
    pooling_tasks: frozenset[str] = frozenset()
    """The --pooling-task values this route sends (vLLM's /pooling `task`; a token-embed model's
    /v1/embeddings); empty: --pooling-task stops the run at start."""
    token_encodings: frozenset[str] = frozenset()
    """The --encoding-format values a token-level answer of this route comes in (a token_embed model's
    /v1/embeddings: float only)."""
    token_rows: bool = False
    """Every answer is token-level, one row per input token (TEI's /embed_all), whatever --pooling-task says."""
    images: Literal["parts", "chat", "alone"] | None = None
    """How the route takes images (--images, a dataset's images; workload/images.py): "parts", beside each
    input's text as content parts (one vector or score per input, one per conversation of a chat); "chat",
    the request becomes one chat conversation of its texts and their images (vLLM's /pooling: one vector);
    "alone", each image an input of its own (one vector per image; the texts are not sent); None, not at
    all: --images, or a dataset with images, stops the run at start."""
    cannot_send: Mapping[str, str] = field(default_factory=dict)
    """Options this route cannot honour, flag -> why: given a value other than its default, one
    stops the run at start, instead of a run that measures something else than was asked."""

    truncation: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """--truncate value (end, start, none) -> the fields this route's body carries for it; a value missing
    here is one the server cannot do, and an empty mapping a server that cannot truncate at all."""
    input_types: tuple[str, ...] = ()
    """The --input-type values the server takes, sent as `input_type`; empty: the route takes none."""
    input_type_required: Callable[[str], bool] | None = None
    """Whether the server refuses every request for this --model without an input_type (Cohere v3 and
    later): then a run without --input-type stops at start."""
    model_required: bool = False
    """The server refuses a request without a model (Ollama: 404 "model '' not found"): --model must be given."""
    forms: Callable[[Endpoint, Settings, bool], AnswerForm] | None = None
    """(this endpoint, the settings, whether the answers are token-level) -> the form its answers come in,
    made once per plan; None: JSON (endpoints/forms.py). vLLM's routes add `bytes` and `bytes_only`
    (endpoints/vllm_bytes.py), KServe its binary tensors."""
    settle: Callable[[Endpoint, Settings, ServerAsk | None], Endpoint] | None = None
    """Asks the server, once when the plan is made, what this route's requests need (KServe: its tensors'
    names) and returns the endpoint bound to it; the ask is None where there is no host yet (the start
    checks before the bundled mock is up). Raises OptionError naming the option that would fix it."""

    def read(self, doc: Any) -> ParsedAnswer:
        """A parsed JSON answer read by the route's reader, its count from where the route says."""
        answer = self.answer(doc)
        if answer.prompt_tokens is None:
            answer.prompt_tokens = self.tokens.read(doc)
        return answer

    def refused_option(self, settings: Settings) -> tuple[str, str] | None:
        """(flag, why) of the first option `settings` sets that this route cannot honour, or None."""
        for flag, why in self.cannot_send.items():
            option = BY_FLAG[flag]
            if getattr(settings, option.dest) != option.default_value:
                return flag, why
        return None

    def values_kind(self, settings: Settings, token_level: bool) -> Kind:
        """The kind of values this route's answers give under `settings` (what the consistency check compares
        them as), known before any answer: a gate that needs vectors or scores is refused at start for a class
        whose answers give none."""
        if token_level:
            return "rows"
        if settings.pooling_task == "classify":
            return "labels"
        if settings.embedding_type in ("binary", "ubinary"):
            return "packed_bits"
        if self.compared_as is not None:
            return self.compared_as
        return "scores" if self.shape == "pairs" else "vectors"


VLLM_TRUNCATION: Mapping[str, Mapping[str, Any]] = {
    # -1: cut to the model's own limit, as vLLM's benchmark always asks; "none" sends nothing (vLLM's default)
    "end": {"truncate_prompt_tokens": -1, "truncation_side": "right"},
    "start": {"truncate_prompt_tokens": -1, "truncation_side": "left"},
    "none": {},
}
TEI_TRUNCATION: Mapping[str, Mapping[str, Any]] = {
    "end": {"truncate": True, "truncation_direction": "Right"},
    "start": {"truncate": True, "truncation_direction": "Left"},
    "none": {"truncate": False},
}
NAMED_TRUNCATION: Mapping[str, Mapping[str, Any]] = {
    # NIM and Cohere: "truncate": NONE | START | END
    "end": {"truncate": "END"},
    "start": {"truncate": "START"},
    "none": {"truncate": "NONE"},
}


def model_field(settings: Settings) -> dict[str, str]:
    """An empty --model lets the server use its default, as vLLM and Infinity allow."""
    return {"model": settings.model} if settings.model else {}


MAX_TOKENS = 100_000_000
"""The most prompt tokens one request may plausibly report. A count past it (2**63 was seen) is a
server's garbage, and once summed into the stats it broke every worker's report to the master."""


MAX_SERVER_MS = 86_400_000
"""A server-side time above a day, in milliseconds, is not a measurement."""
NS_PER_MS = 1_000_000


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return repr(value[:20])
    if isinstance(value, bool | float):
        return repr(value)
    return f"a {type(value).__name__}"


def token_count(value: Any, where: str) -> int | None:
    """A token count the server sent, checked: None when absent, else a whole number in 0..MAX_TOKENS.

    Anything else (negative, boolean, float, string, too large) raises AnswerError naming `where`.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise AnswerError(f"{where} is not a whole number: {_shown(value)}")
    if value < 0:
        raise AnswerError(f"{where} is negative" if value < -MAX_TOKENS else f"{where} is negative: {value}")
    if value > MAX_TOKENS:
        raise AnswerError(f"{where} is implausible: more than {MAX_TOKENS} tokens in one request")
    return value


def usage_tokens(doc: Any) -> int | None:
    """The count in OpenAI's usage (USAGE_TOKENS), for a reader that works its count out itself."""
    return USAGE_TOKENS.read(doc)


def server_duration(value: Any, where: str) -> float | None:
    """A server's own duration in nanoseconds (Go's time.Duration, as Ollama sends it), checked, in ms:
    None when absent, else a whole number in 0..MAX_SERVER_MS ms; anything else raises AnswerError."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise AnswerError(f"{where} is not a whole number of nanoseconds: {_shown(value)}")
    if value < 0:
        raise AnswerError(f"{where} is negative")
    if value > MAX_SERVER_MS * NS_PER_MS:
        raise AnswerError(f"{where} is implausible: more than a day")
    return value / NS_PER_MS


def items_of(doc: Any, key: str) -> Sequence[Any]:
    """doc[key] as a list, or AnswerError naming what was missing."""
    value = doc.get(key) if isinstance(doc, Mapping) else None
    if not isinstance(value, ARRAY):
        raise AnswerError(f"answer has no {key!r} list")
    return value


def data_answer(vector_key: str | None) -> Callable[[Any], ParsedAnswer]:
    """Reader of the OpenAI-style `{"data": [...], "usage": {...}}` answers vLLM and Infinity share."""

    def read(doc: Any) -> ParsedAnswer:
        data = items_of(doc, "data")
        if vector_key is None:
            return ParsedAnswer(len(data), scores=lambda: scores_by_index(data, "score", "data"))
        vectors = [item.get(vector_key) if isinstance(item, Mapping) else None for item in data]
        return ParsedAnswer(len(data), None, vectors)

    return read


def dimensions_field(settings: Settings, name: str = "dimensions") -> dict[str, int]:
    return {name: settings.dimensions} if settings.dimensions else {}


def results_answer(doc: Any) -> ParsedAnswer:
    """Reader of rerank answers: `results` (vLLM, Infinity, Cohere), or Voyage's `data`."""
    results = doc.get("results") if isinstance(doc, Mapping) else None
    if results is None and isinstance(doc, Mapping):
        results = doc.get("data")
    if not isinstance(results, ARRAY):
        raise AnswerError("answer has no 'results' list (nor Voyage's 'data')")
    return ParsedAnswer(len(results), scores=lambda: scores_by_index(results, "relevance_score", "results"))


def scores_by_index(items: Sequence[Any], key: str, where: str) -> list[float]:
    """Each item's score (`key`) in the documents' order: by the item's `index` where every item has one (a
    rerank's results come sorted by score), else in the order given. AnswerError on a missing, repeated or
    out-of-range index or a score that is not a finite number."""
    scores: list[float | None] = [None] * len(items)
    indexed = all(isinstance(item, Mapping) and "index" in item for item in items)
    for position, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise AnswerError(f"{where}[{position}] is not an object")
        at = whole_index(item.get("index"), f"{where}[{position}].index") if indexed else position
        if at >= len(scores) or scores[at] is not None:
            raise AnswerError(f"{where}[{position}].index {at} is out of range or repeated")
        scores[at] = finite_number(item.get(key), f"{where}[{position}].{key}")
    return scores  # type: ignore[return-value]  # every place filled: n items, n distinct indices < n


RERANK_TOKENS = USAGE_TOKENS + COHERE_TOKENS
"""Rerank answers: vLLM's and Infinity's usage, Voyage's `usage.total_tokens`, Cohere's `meta`."""


def finite_number(value: Any, where: str) -> float:
    """A score or value the server sent, checked: a finite JSON number (not a boolean), else AnswerError."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise AnswerError(f"{where} is not a number: {_shown(value)}")
    if not math.isfinite(value):
        raise AnswerError(f"{where} is not finite: {value!r}")
    return float(value)


def whole_index(value: Any, where: str) -> int:
    """An index the server sent (a result's, a sparse entry's), checked: a whole number >= 0, else AnswerError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise AnswerError(f"{where} is not a whole number >= 0")
    return value


def ranking_values(items: Sequence[Any], key: str, where: str) -> ValuesOf:
    """The values of a ranking's answer (`scores_by_index` of its items), for the consistency check: the
    whole answer's scores (position -1) and nothing else."""

    def values(position: int, _body: bytes | None) -> Values:
        if position >= 0:
            raise AnswerError("a ranking's answer holds its documents' scores, not items")
        return Values("scores", scores_by_index(items, key, where))

    return values


def item_values(items: Sequence[Any], read: Callable[[Any, str], Values], where: str) -> ValuesOf:
    """The values of the answer's item at a position, read by `read(item, its name)` only when asked."""

    def values(position: int, _body: bytes | None) -> Values:
        if not 0 <= position < len(items):
            raise AnswerError(f"the answer holds no {where}[{position}]")
        return read(items[position], f"{where}[{position}]")

    return values


def label_values(value: Any, where: str) -> Values:
    """One input's `[{"score", "label"}]` list as label -> probability (a label given twice: AnswerError)."""
    label_scores(value, where)
    found = {item["label"]: float(item["score"]) for item in value}
    if len(found) != len(value):
        raise AnswerError(f"{where} names a label twice")
    return Values("labels", found)


def probability_values(item: Any, where: str) -> Values:
    """One input's probabilities by class index (vLLM's classify `probs`, /pooling's classify `data`)."""
    probs = item.get("probs") if isinstance(item, Mapping) and "probs" in item else item
    if not isinstance(probs, ARRAY) or not probs:
        raise AnswerError(f"{where} holds no list of probabilities")
    return Values("labels", [finite_number(p, f"{where}[{j}]") for j, p in enumerate(list(probs))])


def label_scores(value: Any, where: str) -> None:
    """One input's `[{"score", "label"}]` list, as TEI's /predict and Infinity's /classify answer it."""
    if not isinstance(value, list) or not value:
        raise AnswerError(f"{where} is not a non-empty list of label scores")
    for j, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise AnswerError(f"{where}[{j}] is not an object")
        finite_number(item.get("score"), f"{where}[{j}].score")
        if not isinstance(item.get("label"), str):
            raise AnswerError(f"{where}[{j}].label is not a string")
