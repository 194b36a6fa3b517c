"""The server's limits, asked before the run (WIRE.md):
- TEI refuses a batch above its `max_client_batch_size` (32 by default) with 422 on every request, and an
  input above its `max_input_length` when it does not truncate; its `GET /info` says both. A run whose
  largest prepared batch, or longest prepared input, cannot be served stops at start (or its web UI run
  does not start), naming both numbers and what to change.
- vLLM refuses (400) a whole request holding an input above the model's `max_model_len` unless asked to
  truncate; its `GET /v1/models` says the length, asked at start for every vLLM class that does not truncate.
  A class with prepared inputs above it gets one warning naming how many of its inputs, and of its requests,
  will be refused, and --truncate (the run goes on: its other inputs fit).
The input lengths are each prepared input's own count (workload/input_lengths.py): exact with --tokenizer or
--count-tokens-with-server; otherwise one token a word, which a model's tokenizer passes (sub-words, special
tokens): then the inputs said to be above a limit are at least those, and the message says so.
"""

from __future__ import annotations

import logging

from locust.env import Environment

from poolbench_locust.access import warnings_given
from poolbench_locust.engine.plan import Plan, plan_for
from poolbench_locust.engine.user import endpoint_users
from poolbench_locust.lifecycle import StartCheck
from poolbench_locust.options import OptionError
from poolbench_locust.serverlimits.tei_info import TeiLimits, tei_limits
from poolbench_locust.serverlimits.vllm_models import max_model_len
from poolbench_locust.urls import shown_url
from poolbench_locust.workload.input_lengths import Above

logger = logging.getLogger("poolbench_locust")

ASK_ABOVE_TOKENS = 128
"""vLLM's /v1/models is asked only when the longest prepared input (each input's own count, not a request's
average) is longer than this: no pooling model vLLM serves takes fewer (BERT-style encoders take 512), so a run
of short inputs sends the server nothing more. (Asked at every start, tests/test_capacity.py's search over two
workers answered one bisection step lower: 137.5 for about 153 requests/s; why is not yet known.)"""

COUNTED = {
    "client-tokenizer": "exact, --tokenizer's count",
    "client-tokenize": "exact, the server's /tokenize count",
}
"""How sure each client count is, in the message's words; any other is the word estimate (ESTIMATE)."""
ESTIMATE = (
    "the client's estimate, one token a word: a model's tokenizer counts more (sub-words, special tokens), "
    "so at least this many; --tokenizer or --count-tokens-with-server count exactly"
)


def counted(plan: Plan) -> str:
    """How the plan's input lengths were counted, and so how sure a count above a limit is."""
    return COUNTED.get(plan.client_token_source, ESTIMATE)


def inputs_above(plan: Plan, limit: int) -> Above | None:
    """The plan's prepared inputs above `limit` tokens, or None when none is (or its lengths are not kept)."""
    lengths = plan.input_lengths
    if lengths is None or (above := lengths.above(limit)).inputs == 0:
        return None
    return above


def _share(part: int, whole: int) -> str:
    """A share as a whole percent, never 0 % or 100 % for a part that is neither none nor all."""
    percent = 100 * part / whole if whole else 0.0
    shown = f"{percent:.0f}"
    if shown == "0" and part:
        return "under 1 %"
    if shown == "100" and part < whole:
        return "over 99 %"
    return f"{shown} %"


def _tei_input_error(name: str, plan: Plan, limits: TeiLimits, host: str) -> str | None:
    cap, truncate = limits.max_input_length, plan.settings.truncate
    if cap is None or truncate in ("end", "start"):
        return None
    if truncate is None and limits.auto_truncate is not False:
        return None  # TEI truncates on its own (its default): nothing is refused
    if (above := inputs_above(plan, cap)) is None or plan.input_lengths is None:
        return None
    why = "--truncate none" if truncate == "none" else "TEI runs with --auto-truncate false"
    return (
        f"--truncate: {name}: {above.inputs} of its {plan.input_lengths.input_count} prepared inputs are above "
        f"{cap} tokens, the longest {above.longest} ({counted(plan)}), and TEI at {shown_url(host)} refuses every "
        f"input above {cap} tokens (GET /info {limits.length_field}) when it does not truncate ({why}): give "
        "--truncate end, shorter inputs (--input-len), or start TEI with --auto-truncate true"
    )


def batch_error(environment: Environment) -> str | None:
    """Why the server cannot take this run's requests, or None (also when it does not say its limits)."""
    tei = [u for u in endpoint_users(environment) if u.endpoint.server == "tei"]
    host = environment.host
    if not tei or not host:
        return None
    limits = tei_limits(host)
    if not isinstance(limits, TeiLimits):
        logger.warning(
            "TEI's limits unknown: %s/info gave %s; batches are not checked before the run", shown_url(host), limits
        )
        return None
    cap = limits.max_client_batch_size
    for user_class in tei:
        try:
            plan = plan_for(user_class, environment.parsed_options, host, environment)
        except OptionError:
            return None  # the start checks said why, in their one line
        largest = max((r.sequences for r in plan.requests), default=0)
        if largest > cap:
            option = "--documents" if user_class.endpoint.shape == "pairs" else "--batch-size"
            return (
                f"{option}: {user_class.__name__} sends up to {largest} inputs a request, and TEI at "
                f"{shown_url(host)} takes at most {cap} (GET /info max_client_batch_size; it answers 422 to "
                f"larger batches): give {option} {cap} or less, or start TEI with --max-client-batch-size {largest}"
            )
        if (error := _tei_input_error(user_class.__name__, plan, limits, host)) is not None:
            return error
    return None


def warn_model_length(environment: Environment) -> None:
    """One warning for each vLLM class with prepared inputs above the model's max_model_len (GET /v1/models,
    asked once per host and model), unless the run has vLLM cut them (--truncate end/start)."""
    host = environment.host
    if not host:
        return
    asked: dict[str | None, int | None] = {}
    for user_class in endpoint_users(environment):
        if user_class.endpoint.server != "vllm":
            continue
        try:
            plan = plan_for(user_class, environment.parsed_options, host, environment)
        except OptionError:
            return
        lengths = plan.input_lengths
        if lengths is None or not lengths.input_count:  # it truncates, or sends images alone
            continue
        if lengths.longest <= ASK_ABOVE_TOKENS:
            continue  # every input fits any model vLLM pools with: the server is asked nothing more
        model = plan.settings.model
        if model not in asked:
            asked[model] = max_model_len(host, model, plan.access.api_key)
        if (limit := asked[model]) is None or (above := inputs_above(plan, limit)) is None:
            continue  # no such route or no length in it (nothing to say), or every input fits
        said = ("max_model_len", f"{host} {user_class.__name__} {limit} {above}")
        if said in warnings_given(environment):
            continue  # the web UI's next start with the same pool: said once
        warnings_given(environment).add(said)
        logger.warning(
            "--truncate: %s: %d of its %d prepared inputs are above the model's max_model_len %d at %s "
            "(GET /v1/models), the longest %d tokens (%s); vLLM answers 400 to every request holding one: %d of "
            "the pool's %d requests, %s of those sent; give --truncate end to have vLLM cut them to the model's "
            "limit, as vLLM's own benchmark does, or shorter inputs",
            user_class.__name__,
            above.inputs,
            lengths.input_count,
            limit,
            shown_url(host),
            above.longest,
            counted(plan),
            above.requests,
            lengths.request_count,
            _share(above.requests, lengths.request_count),
        )


def _check(environment: Environment) -> str | None:
    """A batch the server would refuse; else the one warning on the model's length."""
    if (error := batch_error(environment)) is None:
        warn_model_length(environment)
    return error


# A web UI's form may change the host or the batch after start: asked again before users spawn. Set up after
# the start checks and the bundled mock (the host is known), before preflight's one request.
START_CHECK = StartCheck(_check)
setup = START_CHECK.setup
