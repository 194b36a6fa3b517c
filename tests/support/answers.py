"""One answer read by its form and judged by the engine's checks, without a server: what the engine makes of
a body and headers it has already received (the request path's steps after the body, in their order)."""

from __future__ import annotations

from typing import Any

from poolbench_locust.endpoints.spec import AnswerForm, ParsedAnswer
from poolbench_locust.engine import answer_checks
from poolbench_locust.engine.token_rows import TokenRows
from poolbench_locust.options import Settings


def judged(
    form: AnswerForm,
    headers: Any,
    body: bytes,
    size: int,
    req: Any,
    settings: Settings,
    *,
    what: str = "embeddings",
    rows: TokenRows | None = None,
) -> tuple[ParsedAnswer, int]:
    """(the answer, the bytes of the body kept as its head): `body` is the whole body, of `size` bytes after
    inflating. Raises AnswerError (the form's verdict) or BadResponse (the engine's checks')."""
    kept = 0
    if form.keeps_body:
        answer = form.read(headers, None, body, size, req.expected_items)
        data = body
    else:
        kept, note = form.head(headers, rows.hidden() if rows is not None else None)
        answer = form.read(headers, note, body[:kept], size, req.expected_items)
        data = b""
    answer_checks.judge(answer, data, req, settings, what, rows, {})
    return answer, kept
