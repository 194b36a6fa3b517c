"""Client-side token counts: the documented word estimate, a local tokenizer.json, or the server's
own /tokenize route (asked once per distinct prompt, before the test, never inside a timed request)."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path
from typing import Protocol

import orjson

from poolbench_locust.endpoints.spec import AnswerError, token_count
from poolbench_locust.options import OptionError, Settings
from poolbench_locust.wire import count_words

TOKENIZE_ANSWER_LIMIT = 16 * 1024 * 1024
"""An answer of /tokenize lists every token id: far below this for any prompt we send."""
MAX_SPECIAL_TOKENS = 64
"""A tokenizer adds a few special tokens to a text; a count beyond its characters plus these is not a count."""


class TokenCounter(Protocol):
    source: str
    """How the count was made, as the stats label it."""

    def count(self, text: str) -> int: ...


class WordEstimate:
    """One token per whitespace-separated word: an estimate, and labelled one."""

    source = "client-estimate"

    def count(self, text: str) -> int:
        return count_words(text)


class TokenizerFile:
    """Exact counts from a local Hugging Face tokenizer.json (special tokens included, as servers count).

    `path` is the file or a model directory holding it (as a model's snapshot on disk is laid out).
    """

    source = "client-tokenizer"

    def __init__(self, path: str) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise OptionError(
                "--tokenizer", "needs the 'tokenizers' package: pip install 'poolbench-locust[tokenizer]'"
            ) from None
        file = Path(path)
        if file.is_dir():
            if not (file / "tokenizer.json").is_file():
                raise OptionError("--tokenizer", f"the directory {path!r} holds no tokenizer.json")
            file = file / "tokenizer.json"
        try:
            self._tokenizer = Tokenizer.from_file(str(file))
        except Exception as e:  # the library raises its own Exception type for a missing or bad file
            raise OptionError("--tokenizer", f"cannot load {path!r}: {e}") from None
        # A model's tokenizer.json often pads and truncates every text to a fixed length (all-MiniLM-L6-v2:
        # 128) for batched training. A server counts the tokens a text really has, and so must we.
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text).ids)


class TokenizeRoute:
    """The server's own count (vLLM's POST /tokenize), cached per prompt."""

    source = "client-tokenize"

    def __init__(self, host: str, settings: Settings, api_key: str | None) -> None:
        self._url = host.rstrip("/") + "/tokenize"
        self._model = settings.model
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._timeout = settings.request_timeout
        self._counts: dict[str, int] = {}
        self.max_model_len: int | None = None
        """The model's context length as /tokenize reported it (vLLM sends it with every count)."""

    def count(self, text: str) -> int:
        if (known := self._counts.get(text)) is not None:
            return known
        body = orjson.dumps({"model": self._model, "prompt": text} if self._model else {"prompt": text})
        request = urllib.request.Request(self._url, data=body, headers=self._headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as response:
                doc = orjson.loads(response.read(TOKENIZE_ANSWER_LIMIT))
            # A count that is not plausible would reach every request's stats, and the workers' reports.
            count = token_count(doc["count"], "count")
            if count is None:
                raise KeyError("count")
        except urllib.error.HTTPError as e:
            raise OptionError("--count-tokens-with-server", f"{self._url} answered HTTP {e.code}") from None
        except (OSError, ValueError, KeyError, TypeError, AnswerError) as e:
            raise OptionError("--count-tokens-with-server", f"{self._url} gave no token count: {e}") from None
        # and one a text of this size could have: a few special tokens past one token per byte
        if count > len(text.encode()) + MAX_SPECIAL_TOKENS:
            raise OptionError("--count-tokens-with-server", f"{self._url} gave an impossible token count: {count}")
        limit = doc.get("max_model_len")
        if isinstance(limit, int) and not isinstance(limit, bool) and 0 < limit < 2**31:
            self.max_model_len = limit
        self._counts[text] = count
        return count


def counter_for(settings: Settings, host: str | None, api_key: str | None = None) -> TokenCounter:
    if settings.tokenizer:
        return TokenizerFile(settings.tokenizer)
    if settings.count_tokens_with_server:
        if not host:
            raise OptionError("--count-tokens-with-server", "needs --host")
        return TokenizeRoute(host, settings, api_key)
    return WordEstimate()
