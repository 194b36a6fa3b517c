"""Client-side token counts: the documented word estimate, a local tokenizer.json, or the server's
own /tokenize route (asked once per distinct prompt, before the test, never inside a timed request)."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Protocol

import orjson

from poolbench_locust.endpoints.spec import AnswerError, token_count
from poolbench_locust.options import OptionError, Settings
from poolbench_locust.wire import count_words


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
    """Exact counts from a local Hugging Face tokenizer.json (special tokens included, as servers count)."""

    source = "client-tokenizer"

    def __init__(self, path: str) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise OptionError(
                "--tokenizer", "needs the 'tokenizers' package: pip install 'poolbench-locust[tokenizer]'"
            ) from None
        try:
            self._tokenizer = Tokenizer.from_file(path)
        except Exception as e:  # the library raises its own Exception type for a missing or bad file
            raise OptionError("--tokenizer", f"cannot load {path!r}: {e}") from None

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

    def count(self, text: str) -> int:
        if (known := self._counts.get(text)) is not None:
            return known
        body = orjson.dumps({"model": self._model, "prompt": text} if self._model else {"prompt": text})
        request = urllib.request.Request(self._url, data=body, headers=self._headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as response:
                # A count that is not plausible would reach every request's stats, and the workers' reports.
                count = token_count(orjson.loads(response.read())["count"], "count")
            if count is None:
                raise KeyError("count")
        except urllib.error.HTTPError as e:
            raise OptionError("--count-tokens-with-server", f"{self._url} answered HTTP {e.code}") from None
        except (OSError, ValueError, KeyError, TypeError, AnswerError) as e:
            raise OptionError("--count-tokens-with-server", f"{self._url} gave no token count: {e}") from None
        self._counts[text] = count
        return self._counts[text]


def counter_for(settings: Settings, host: str | None, api_key: str | None = None) -> TokenCounter:
    if settings.tokenizer:
        return TokenizerFile(settings.tokenizer)
    if settings.count_tokens_with_server:
        if not host:
            raise OptionError("--count-tokens-with-server", "needs --host")
        return TokenizeRoute(host, settings, api_key)
    return WordEstimate()
