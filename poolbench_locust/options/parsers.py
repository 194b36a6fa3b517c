"""The parsers of option values: text in, value out, argparse.ArgumentTypeError with the one line the
user sees. argparse calls them at start (its `type=`), and `Option.value` calls them again on the text
the web UI's form sends, so a value is judged by one rule wherever it comes from."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import orjson

from poolbench_locust.options.values import ANSWER_TERMS, SLO_KEYS, TIME_KEYS, ExtraBody, Slo, Span
from poolbench_locust.urls import shown_url


class OptionError(ValueError):
    """A bad option value or combination; its text is the one line the user sees."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{option}: {message}")
        self.option = option


def whole(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"must be a whole number >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be a whole number >= {minimum}, got {value}")
        return value

    return parse


def port(text: str) -> int:
    value = whole(1)(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be a port number in 1..65535, got {value}")
    return value


def seconds(text: str) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {value}")
    return value


class one_of:
    """One of a few words; the words are also the option's `choices` in --help and in the web form."""

    def __init__(self, choices: tuple[str, ...]) -> None:
        self.choices = choices

    def __call__(self, text: str) -> str:
        if text not in self.choices:
            raise argparse.ArgumentTypeError(f"must be one of {', '.join(self.choices)}; got {text!r}")
        return text


def span(minimum: int) -> Callable[[str], Span]:
    one = whole(minimum)

    def parse(text: str) -> Span:
        lo, _, hi = str(text).partition(":")
        low = one(lo)
        high = one(hi) if hi else low
        if high < low:
            raise argparse.ArgumentTypeError(f"range must be LOW:HIGH with LOW <= HIGH, got {text!r}")
        return Span(low, high)

    return parse


def rates(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be numbers separated by commas, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"must be numbers > 0 separated by commas, got {text!r}")
    return values


MAX_IMAGE_SIDE = 8192


def image_size(text: str) -> tuple[int, int]:
    """WxH in pixels, each side 1..MAX_IMAGE_SIDE."""
    width, sep, height = str(text).lower().partition("x")
    if sep and width.isdigit() and height.isdigit() and 1 <= int(width) <= MAX_IMAGE_SIDE >= int(height) >= 1:
        return int(width), int(height)
    raise argparse.ArgumentTypeError(f"must be WIDTHxHEIGHT in pixels, each 1..{MAX_IMAGE_SIDE}, got {text!r}")


def counts(text: str) -> tuple[int, ...]:
    one = whole(1)
    return tuple(one(v) for v in text.split(",") if v.strip()) or (one(text),)


DATASET_FORMS = ("file:", "trace:", "hf:")
"""The forms of --dataset besides random, each followed by what it names."""


def dataset(text: str) -> str:
    if text != "random" and not any(text.startswith(form) and len(text) > len(form) for form in DATASET_FORMS):
        raise argparse.ArgumentTypeError(
            f"must be 'random', 'file:PATH', 'trace:FILE.jsonl' or 'hf:NAME[:SPLIT]', got {text!r}"
        )
    return text


def non_negative(text: str) -> float:
    try:
        value = float(text.removesuffix("s"))
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}") from None
    # nan passes every comparison and inf would be a wait or a length that never ends: a number is finite.
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}")
    return value


def positive(text: str) -> float:
    try:
        value = non_negative(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}") from None
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return value


def _per_host(text: str, one: Callable[[str], Any]) -> tuple[Any, ...]:
    """One value, or one per host of --ab-host, A,B: each parsed by `one`."""
    values = [v.strip() for v in str(text).split(",")]
    if len(values) > 2:
        raise argparse.ArgumentTypeError(f"takes one value, or one per host of --ab-host (A,B), got {text!r}")
    try:
        return tuple(one(v) for v in values)
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"{e}; one value, or one per host of --ab-host: A,B") from None


def prices(text: str) -> tuple[float, ...]:
    """A price (finite, > 0), or one per host of --ab-host: A,B."""
    return _per_host(text, positive)


def gpu_counts(text: str) -> tuple[int, ...]:
    """A whole number >= 1, or one per host of --ab-host: A,B."""
    return _per_host(text, whole(1))


def ratio(text: str) -> float:
    value = non_negative(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be a ratio from 0 to 1, got {value}")
    return value


def below_one(text: str) -> float:
    """A share that may be 0 (off) but never the whole: 0 <= R < 1."""
    value = ratio(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"must be a share from 0 up to (not including) 1, got {value}")
    return value


def share(text: str) -> float:
    """A share of a whole, 0 < R <= 1: a floor of 0 would pass every run."""
    value = ratio(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be a share above 0 and at most 1, got {text!r}")
    return value


def cosine_floor(text: str) -> float:
    """A lowest cosine similarity, -1 < X <= 1: -1 would pass every answer, above 1 none."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"must be a cosine in (-1, 1], got {text!r}") from None
    if not -1 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be a cosine in (-1, 1], got {text!r}")
    return value


def route(text: str) -> str:
    if not text.startswith("/"):
        raise argparse.ArgumentTypeError(f"must start with '/', got {text!r}")
    return text


def file_name(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must be a file name, got an empty one")
    return text


def slo(text: str) -> Slo | None:
    """`e2e_ms=300,ttfb_ms=100,cosine=0.99` -> Slo; empty -> None; anything else raises ArgumentTypeError."""
    if not str(text).strip():
        return None
    bounds: dict[str, float] = {}
    for pair in str(text).split(","):
        key, sep, value = pair.strip().partition("=")
        key = key.strip()
        if not sep or key not in SLO_KEYS:
            raise argparse.ArgumentTypeError(
                f"must be KEY=MS pairs separated by commas, KEY one of {', '.join(TIME_KEYS)} (or the answers' "
                f"{ANSWER_TERMS}); got {pair.strip()!r}"
            )
        if key in bounds:
            raise argparse.ArgumentTypeError(f"{key} is given twice")
        bounds[key] = _slo_bound(key, value)
    return Slo(**bounds)


def _slo_bound(key: str, value: str) -> float:
    """One term's bound: ms above 0; a cosine in (-1, 1]; a share in [0, 1]."""
    if key == "cosine":
        try:
            return cosine_floor(value.strip())
        except argparse.ArgumentTypeError as e:
            raise argparse.ArgumentTypeError(f"{key} {e}") from None
    if key == "top1_changed":
        try:
            return ratio(value.strip())
        except argparse.ArgumentTypeError as e:
            raise argparse.ArgumentTypeError(f"{key} {e}") from None
    try:
        bound = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{key} must be a number of ms > 0, got {value.strip()!r}") from None
    if not 0 < bound < float("inf"):
        raise argparse.ArgumentTypeError(f"{key} must be a number of ms > 0, got {value.strip()!r}")
    return bound


HOST_LABELS = ("A=", "B=")
"""--server-metrics with --ab-host: a URL may say whose it is, A=URL or B=URL."""


def metrics_targets(text: str) -> str:
    """auto, off, or one or more http(s) URLs of /metrics, separated by commas, each maybe labelled A= or B=."""
    if text in ("auto", "off"):
        return text
    for url in (u.strip() for u in text.split(",")):
        parts = urlsplit(url.removeprefix(HOST_LABELS[0]).removeprefix(HOST_LABELS[1]))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise argparse.ArgumentTypeError(
                f"must be auto, off, or http(s):// URLs separated by commas, got {shown_url(url)!r}"
            )
    return text


def host_url(text: str) -> str:
    """An http(s) URL with a host, as --host takes (--ab-host)."""
    parts = urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(
            f"must be an http:// or https:// URL with a host (e.g. http://127.0.0.1:8001), got {shown_url(text)!r}"
        )
    return text.strip().rstrip("/")


MAX_EXTRA_BODY_CHARS = 16384
"""The longest --extra-body: a few fields of a server's own, not a dataset; it is sent in every request."""


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        twice = next(key for key in keys if keys.count(key) > 1)
        raise ValueError(f"the field {twice!r} is given twice")
    return dict(pairs)


def _not_a_number(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def extra_body(text: str) -> ExtraBody:
    """A JSON object of fields merged into every request body; anything else raises ArgumentTypeError."""
    if len(text) > MAX_EXTRA_BODY_CHARS:
        raise argparse.ArgumentTypeError(
            f"must be a JSON object of at most {MAX_EXTRA_BODY_CHARS} characters, got {len(text)}"
        )
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_constant=_not_a_number)
    except RecursionError:
        raise argparse.ArgumentTypeError("must be a JSON object, got one nested too deep") from None
    except ValueError as e:  # json.JSONDecodeError is one
        raise argparse.ArgumentTypeError(f"must be a JSON object, e.g. '{{\"priority\": 1}}': {e}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object ({{...}}), got a JSON {type(value).__name__}")
    try:  # what the requests are written with: an integer past 64 bits is JSON it cannot write
        orjson.dumps(value)
    except orjson.JSONEncodeError as e:
        raise argparse.ArgumentTypeError(f"cannot be sent: {e}") from None
    return ExtraBody(json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False))
