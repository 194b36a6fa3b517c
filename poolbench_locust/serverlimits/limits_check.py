"""The server's limits, asked before the run (WIRE.md):
- TEI refuses a batch above its `max_client_batch_size` (32 by default) with 422 on every request, and an
  input above its `max_input_length` when it does not truncate; its `GET /info` says both. A run whose
  largest prepared batch, or longest prepared input, cannot be served stops at start (or its web UI run
  does not start), naming both numbers and what to change.
- vLLM refuses (400) every input above the model's `max_model_len` unless asked to truncate; its
  `GET /v1/models` says the length. A run whose longest input is above it, without --truncate, gets one
  warning naming --truncate (the run goes on: its other inputs may fit).
The input lengths are the client's counts of the prepared requests: a request's tokens over its inputs,
so the longest input is at least that (the client counts requests, not each input).
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

logger = logging.getLogger("poolbench_locust")

ASK_ABOVE_TOKENS = 128
"""vLLM's /v1/models is asked only when an input is longer than this: no pooling model vLLM serves takes
fewer (BERT-style encoders take 512), so a run of short inputs sends the server nothing more."""


def longest_input(plan: Plan) -> int:
    """The client's count of the longest prepared input, at least (a request's tokens over its inputs)."""
    return max((-(-r.client_tokens // r.sequences) for r in plan.requests if r.sequences > 0), default=0)


def _tei_input_error(name: str, plan: Plan, limits: TeiLimits, host: str) -> str | None:
    cap, truncate = limits.max_input_length, plan.settings.truncate
    if cap is None or truncate in ("end", "start"):
        return None
    if truncate is None and limits.auto_truncate is not False:
        return None  # TEI truncates on its own (its default): nothing is refused
    longest = longest_input(plan)
    if longest <= cap:
        return None
    why = "--truncate none" if truncate == "none" else "TEI runs with --auto-truncate false"
    counted = plan.client_token_source
    return (
        f"--truncate: {name} sends inputs of {longest} tokens or more (the client's count, {counted}), and TEI at "
        f"{shown_url(host)} refuses every input above {cap} tokens (GET /info {limits.length_field}) when it does not "
        f"truncate ({why}): give --truncate end, shorter inputs (--input-len), or start TEI with --auto-truncate true"
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
    """One warning, once per host, when a vLLM class's longest input is above the model's max_model_len."""
    host = environment.host
    if not host or ("max_model_len", host) in warnings_given(environment):
        return
    for user_class in endpoint_users(environment):
        if user_class.endpoint.server != "vllm":
            continue
        try:
            plan = plan_for(user_class, environment.parsed_options, host, environment)
        except OptionError:
            return
        longest = longest_input(plan)
        if plan.settings.truncate is not None or longest <= ASK_ABOVE_TOKENS:
            continue
        limit = max_model_len(host, plan.settings.model, plan.access.api_key)
        if limit is None:
            return  # no such route, or no length in it: nothing to say
        if longest > limit:
            warnings_given(environment).add(("max_model_len", host))
            logger.warning(
                "--truncate: %s sends inputs of %d tokens or more (the client's count, %s), above the model's "
                "max_model_len %d at %s (GET /v1/models): vLLM answers 400 to every such input; give --truncate end "
                "to have it cut them to the model's limit, as vLLM's own benchmark does",
                user_class.__name__,
                longest,
                plan.client_token_source,
                limit,
                shown_url(host),
            )
            return


def _check(environment: Environment) -> str | None:
    """A batch the server would refuse; else the one warning on the model's length."""
    if (error := batch_error(environment)) is None:
        warn_model_length(environment)
    return error


# A web UI's form may change the host or the batch after start: asked again before users spawn. Set up after
# the start checks and the bundled mock (the host is known), before preflight's one request.
START_CHECK = StartCheck(_check)
setup = START_CHECK.setup
