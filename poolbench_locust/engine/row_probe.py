"""What a row of a token-level raw answer is, learnt once when the plan is made: its width and the rows a pooler
drops, from the same request asked in float JSON.

A raw token-level body (vLLM's `bytes_only`: all the inputs' rows run together, no header) holds Σ rows x width x
dtype bytes and nothing else. Where the client counts each input's tokens exactly (--tokenizer,
--count-tokens-with-server, no --truncate), every body is checked against them input by input and nothing is
asked here. Elsewhere the answer form gives the request's float twin (`AnswerForm.row_probe`): its answer
holds each input's rows, their width (the hidden size, or a token_classify model's labels) and the server's
count, from which `TokenRows` learns the one (rows dropped, width) pair; every raw body's size then gives its
token total (`TokenRows.tokens_of_size`, token_source `body-size`).

A server's configuration cannot stand in for this answer: it would give the hidden size at most (vLLM shows
its configuration only at the dev-mode /server_info), neither a token_classify row's width nor the rows
a pooler drops, and a wrong guess of those would shift every count. One request, the shortest of the pool,
asked in every process that makes the plan, before any timed request; where it cannot be answered the run
stops at start with one line naming the options that do without it.
"""

from __future__ import annotations

import logging

from poolbench_locust.endpoints.spec import AnswerError, AnswerForm, Endpoint
from poolbench_locust.engine import token_rows
from poolbench_locust.engine.body import BadResponse
from poolbench_locust.engine.server_ask import ServerPost
from poolbench_locust.engine.token_rows import TokenRows
from poolbench_locust.options import OptionError, Settings
from poolbench_locust.wire import DTYPE_SIZES
from poolbench_locust.workload import PreparedRequest

logger = logging.getLogger("poolbench_locust")


def learn_rows(
    rows: TokenRows,
    endpoint: Endpoint,
    form: AnswerForm,
    settings: Settings,
    requests: list[PreparedRequest],
    route: str,
    post: ServerPost | None,
    named: str,
    answer_limit: int,
) -> None:
    """Teach `rows` the (rows dropped, width) pair of a form whose answers give their size alone, from one float
    answer to the shortest of `requests` (POSTed to `route`, at most `answer_limit` bytes read). Nothing is
    asked where the form needs no probe, with late chunking (its rows do not say their tokens) or without a
    host yet (`post` None: the plan made with one asks). Raises OptionError naming the options that need no
    probe when the answer cannot teach it."""
    if rows.chunk is not None or not requests:
        return
    probe = min(requests, key=lambda r: (r.client_tokens, r.expected_items))
    if (body := form.row_probe(probe.body)) is None or post is None:
        return
    task = settings.pooling_task or "token-level"

    def refused(why: str) -> OptionError:
        return OptionError(
            "--tokenizer",
            f"{named}: the token rows of a {task} {settings.encoding_format} answer run together, and their width "
            f"could not be learnt from one float answer at start: {why}; give --tokenizer or "
            "--count-tokens-with-server, or use --encoding-format bytes",
        )

    try:
        answer = endpoint.read(post(route, body, settings.request_timeout, answer_limit))
    except (OSError, ValueError, AnswerError) as e:
        raise refused(str(e)[:300]) from None
    if answer.items != probe.expected_items:
        raise refused(f"it held {answer.items} items for {probe.expected_items} inputs")
    if answer.prompt_tokens is None:
        raise refused("it held no token count to tell the rows a pooler drops")
    try:
        counts, width = token_rows.rows_of_json(answer.vectors)
        rows.judge_rows(counts, width, answer.prompt_tokens, answer.tokens_where)
    except BadResponse as e:
        raise refused(str(e)[:300]) from None
    ((dropped, _),) = rows.shapes or ((0, width),)
    # The server counts this request and the stats do not: its tokens said, for whoever reconciles the two.
    logger.info(
        "%s: token rows of %s values, %s row(s) a pooler drops per input, learnt from one float answer of %s "
        "tokens at start (a request the server counts and the stats do not): each %s answer's tokens are its "
        "size / (%s x %s bytes), plus those rows (token source %s)",
        named,
        width,
        dropped,
        answer.prompt_tokens,
        settings.encoding_format,
        width,
        DTYPE_SIZES[settings.embed_dtype],
        token_rows.BODY_SIZE,
    )
