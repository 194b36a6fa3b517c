"""vLLM's `GET /v1/models`: each model card carries `max_model_len`, the longest prompt vLLM takes. An input
above it is refused (400) unless the request asks vLLM to truncate (`truncate_prompt_tokens`, --truncate).

The answer is untrusted and the route may not exist (another server behind an OpenAI-compatible class):
anything but a card with a whole `max_model_len` in range is no limit, and no word about it.
"""

from __future__ import annotations

from typing import Any

import orjson

from poolbench_locust.servermetrics.scrape import ScrapeError, fetch

MODELS_TIMEOUT_S = 5.0
MODELS_LIMIT = 1 << 20
"""Bytes of /v1/models read at most (vLLM's is under 1 kB a model)."""
MAX_LENGTH = 1 << 30


def read_models(body: bytes, model: str | None) -> int | None:
    """The `max_model_len` of the card named `model` (or of the first card that has one), or None."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    cards = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(cards, list):
        return None
    lengths: list[tuple[bool, int]] = []
    for card in cards[:1000]:
        if not isinstance(card, dict):
            continue
        length: Any = card.get("max_model_len")
        if isinstance(length, int) and not isinstance(length, bool) and 1 <= length <= MAX_LENGTH:
            lengths.append((card.get("id") == model, length))
    named = [length for is_it, length in lengths if is_it]
    chosen = named or [length for _, length in lengths]
    return chosen[0] if chosen else None


def max_model_len(host: str, model: str | None, api_key: str | None) -> int | None:
    """GET host/v1/models once, bounded in time and size: the model's length limit, or None."""
    headers = {"Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    try:
        body = fetch(host.rstrip("/") + "/v1/models", timeout=MODELS_TIMEOUT_S, limit=MODELS_LIMIT, headers=headers)
    except ScrapeError:
        return None
    return read_models(body, model)
