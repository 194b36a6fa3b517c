"""A User class's plan: the options it runs with, checked once, its headers, and the requests
prepared before the test, shared by every user of the class under one set of options."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol
from urllib.parse import quote

from poolbench_locust.access import Access, access_for, warnings_given
from poolbench_locust.endpoints.forms import form_of
from poolbench_locust.endpoints.spec import AnswerForm, Endpoint
from poolbench_locust.engine import packed
from poolbench_locust.engine.ab import mark as ab_mark
from poolbench_locust.engine.comparison_budget import ALWAYS, Always, ComparisonBudget, budget_for
from poolbench_locust.engine.limits import Limits
from poolbench_locust.engine.row_probe import learn_rows
from poolbench_locust.engine.server_ask import server_ask, server_post
from poolbench_locust.engine.target import request_path
from poolbench_locust.engine.token_rows import TokenRows
from poolbench_locust.locust_options import LocustOptions
from poolbench_locust.options import BY_FLAG, OptionError, Settings
from poolbench_locust.store import Slot
from poolbench_locust.wire import (
    EMBED_AND_TOKEN_CLASSIFY_REFUSED,
    JSON,
    TOKEN_POOLING_TASKS,
)
from poolbench_locust.workload import PreparedRequest, request_fields, request_pool
from poolbench_locust.workload.arrival import Schedule
from poolbench_locust.workload.input_lengths import InputLengths, lengths_for
from poolbench_locust.workload.pool import MASTER
from poolbench_locust.workload.sources import dataset_for
from poolbench_locust.workload.tokens import counter_for

logger = logging.getLogger("poolbench_locust")


class Planned(Protocol):
    """What a plan reads of a User class (engine/user.py's EndpointUser declares each), and its __name__."""

    endpoint: ClassVar[Endpoint]
    host: str | None
    request_name: ClassVar[str | None]


@dataclass
class Plan:
    """What every user of one User class shares under one set of options."""

    settings: Settings
    endpoint: Endpoint
    """The User class's endpoint, as the server's answers at plan time settled it (Endpoint.settle):
    what builds and reads this plan's requests."""
    route: str
    """The route of the User class (or --endpoint-path): the server's own name for it."""
    path: str
    """The path requested: the path of --host, then the route (engine/target.py)."""
    label: str
    headers: dict[str, str]
    requests: list[PreparedRequest]
    client_token_source: str
    """How PreparedRequest.client_tokens were counted: client-estimate, client-tokenizer or client-tokenize."""
    access: Access
    """The API key sent (in `headers`) and the TLS checks of the host."""
    form: AnswerForm
    """The form the answers come in, as the endpoint declares it for these settings: how each is read,
    and what it learned of them (a bytes_only answer's dimension)."""
    limits: Limits = field(default_factory=Limits)
    max_kept: int = Limits().max_body_bytes
    """--max-body-mb in bytes: the most of a body kept to be parsed whole (read on every request)."""
    schedule: Schedule | None = None
    """A trace's times (--dataset trace:): `requests[i]` leaves at the schedule's line i."""
    references: list[PreparedRequest] = field(default_factory=list)
    """The reference requests (docs/consistency.md), by reference id: each answered alone before the users
    start; the pool's requests that carry one say so in their `refs`. Empty: no answer is compared."""
    comparisons: ComparisonBudget | Always = ALWAYS
    """Which of the answers that carry a reference are compared (engine/comparison_budget.py): at most
    --consistency-rate of the inputs, at least one a second."""
    reference_inputs: list[Any] = field(default_factory=list)
    """Each reference's input, by reference id (workload/pool.py reference_input): the text, or a pairs
    request's query and documents; what a reference file (--consistency-reference) is matched by."""
    token_rows: TokenRows | None = None
    """Token-level answers (--pooling-task token_embed/token_classify, TEI's /embed_all): their rows
    checked against the tokens, and what the answers taught of their shape; None for every other class."""
    input_lengths: InputLengths | None = None
    """The pool's inputs by their token count (counted as `client_token_source` says), for the start check
    that compares them with the server's length limit (serverlimits/); None where no limit is checked."""

    @property
    def secrets(self) -> tuple[str | None, ...]:
        """What no message, log line or report may show."""
        return (self.access.api_key, self.access.host_password)


def _carrying(requests: list[PreparedRequest]) -> float:
    """Requests sent with their reference input per turn of the pool: each that carries one, but a pool of fresh
    images (workload/pool.py's FreshImages) sends such a request as prepared one take in a few."""
    carrying = getattr(requests, "carrying", None)
    return sum(1 for r in requests if r.refs) if carrying is None else carrying


def check_settings(user_class: type[Planned], settings: Settings) -> None:
    """Raise OptionError for a combination the User class's endpoint cannot serve."""
    endpoint = user_class.endpoint
    if settings.encoding_format not in endpoint.encodings:
        kinds = ", ".join(sorted(endpoint.encodings))
        raise OptionError(
            "--encoding-format",
            f"{user_class.__name__} ({endpoint.route}) cannot answer {settings.encoding_format}; it answers {kinds}",
        )
    _check_pooling_task(user_class, settings)
    if settings.images and endpoint.images is None:
        raise OptionError(
            "--images",
            f"{user_class.__name__} ({endpoint.route}) cannot send images: its server takes none; images go to "
            "EmbeddingsChatUser, PoolingUser, RerankUser, ScoreUser, CohereEmbedUser, SGLangRerankUser and "
            "InfinityEmbeddingsUser",
        )
    if (refused := endpoint.refused_option(settings)) is not None:
        flag, why = refused
        value = getattr(settings, BY_FLAG[flag].dest)
        given = flag if value is True else f"{flag} {value}"
        raise OptionError(flag, f"{user_class.__name__} ({endpoint.route}) cannot honour {given}: {why}")
    if (refused := request_fields.refused(endpoint, settings)) is not None:
        flag, why = refused
        raise OptionError(flag, f"{user_class.__name__} ({endpoint.route}) {why}")
    packed.check_settings(user_class.__name__, endpoint, settings)
    if not settings.model.strip():
        if "{model}" in endpoint.route:
            raise OptionError(
                "--model", f"{user_class.__name__} ({endpoint.route}) names the model in its path: give --model"
            )
        if endpoint.model_required:
            raise OptionError(
                "--model", f"{user_class.__name__} ({endpoint.route}): the server needs a model: give --model"
            )


def _check_pooling_task(user_class: type[Planned], settings: Settings) -> None:
    """--pooling-task only where the route sends it, and a token-level one in an encoding it answers."""
    endpoint, task = user_class.endpoint, settings.pooling_task
    if task is None:
        return
    named = f"{user_class.__name__} ({endpoint.route})"
    if not endpoint.pooling_tasks:
        raise OptionError(
            "--pooling-task",
            f"{named} sends no task: it is for PoolingUser (/pooling), and token_embed for EmbeddingsUser",
        )
    if task not in endpoint.pooling_tasks:
        why = (
            f"vLLM answers: {EMBED_AND_TOKEN_CLASSIFY_REFUSED}"
            if task == "embed&token_classify"
            else f"it sends {', '.join(sorted(endpoint.pooling_tasks))}"
        )
        raise OptionError("--pooling-task", f"{named} cannot send {task}: {why}")
    if task in TOKEN_POOLING_TASKS and settings.encoding_format not in endpoint.token_encodings:
        kinds = ", ".join(sorted(endpoint.token_encodings))
        raise OptionError(
            "--encoding-format",
            f"{named} answers a {task} model in {kinds}, not {settings.encoding_format}",
        )


def token_level(endpoint: Endpoint, settings: Settings) -> bool:
    """Whether the answers hold one row per input token: a token-level task, or a route that only answers so."""
    return endpoint.token_rows or settings.pooling_task in TOKEN_POOLING_TASKS


def route_of(endpoint: Endpoint, settings: Settings) -> str:
    """The route requested: --endpoint-path, or the endpoint's with `{model}` made --model, URL-quoted."""
    if settings.endpoint_path:
        return settings.endpoint_path
    return endpoint.route.replace("{model}", quote(settings.model.strip(), safe=""))


_PLANS: Slot[dict[tuple[Any, ...], Plan]] = Slot("plans", dict)
"""Each User class's plan, per set of options and host. It outlives a run: the web UI's next run with
the same options and host sends the same prepared requests."""


def plan_for(user_class: type[Planned], options: Any, host: str | None = None, environment: Any = None) -> Plan:
    """The shared plan of a User class: checked options, headers, and the requests prepared before the test.

    Made once per environment for each User class, set of options and host; without an environment, anew.
    """
    settings = Settings.from_options(options)
    target = host or user_class.host or LocustOptions(options).host
    warned = warnings_given(environment) if environment is not None else None
    access = access_for(settings, target, warned)
    limits = Limits.of(settings)
    key = (user_class, settings, target, access, limits)
    plans = _PLANS.of(environment) if environment is not None else {}
    if (plan := plans.get(key)) is None:
        check_settings(user_class, settings)
        endpoint = user_class.endpoint
        route = route_of(endpoint, settings)
        path = request_path(target, route)  # before anything is asked of the host
        if endpoint.settle is not None:
            try:
                endpoint = endpoint.settle(endpoint, settings, server_ask(target, access) if target else None)
            except OptionError as e:  # the endpoint's words, said of its User class as every start check is
                why = str(e).removeprefix(f"{e.option}: ")
                raise OptionError(e.option, f"{user_class.__name__} ({endpoint.route}): {why}") from None
        counter = counter_for(settings, target, access.api_key)
        rows = TokenRows(settings.late_chunk_size) if token_level(endpoint, settings) else None
        form = form_of(endpoint, settings, rows is not None)
        headers = {"Content-Type": JSON, "Accept": form.content_type, "Accept-Encoding": "gzip, deflate"}
        if access.api_key:
            headers["Authorization"] = f"Bearer {access.api_key}"
        dataset = dataset_for(settings, endpoint.shape, counter)
        # Each input's own count is kept only where a token-level answer is checked against it, and only
        # where it is exact (a tokenizer, the server's /tokenize) and the server cuts nothing (--truncate).
        per_input = rows is not None and counter.source != "client-estimate" and settings.truncate in (None, "none")
        references: list[PreparedRequest] | None = None
        reference_inputs: list[Any] = []
        if not settings.no_consistency and settings.consistency_inputs:
            if (uncompared := form.not_compared) is None:  # the form says why its answers cannot be compared
                references = []
            elif (said := ("consistency", f"{user_class.__name__} {route}")) not in (warned or set()):
                if warned is not None:
                    warned.add(said)  # once a run, however many hosts the plan is made for
                logger.info("consistency: %s (%s): not compared: %s", user_class.__name__, route, uncompared)
        lengths = lengths_for(endpoint, settings)
        # each worker draws its own inputs and images (Locust's index; 0 in a process of its own; none on a master)
        runner = getattr(environment, "runner", None)
        index = getattr(runner, "worker_index", None)
        worker = MASTER if runner is not None and index is None else max(0, int(index or 0))
        requests = request_pool(
            endpoint, settings, dataset, counter, per_input, references, reference_inputs, lengths, worker
        )
        if rows is not None and not per_input:  # what a row is, for a form whose answers give their size alone
            post = server_post(target, access) if target else None
            named = f"{user_class.__name__} ({endpoint.route})"
            learn_rows(rows, endpoint, form, settings, requests, route, post, named, limits.max_body_bytes)
        plan = Plan(
            settings=settings,
            route=route,
            path=path,
            label=(user_class.request_name or path) + ab_mark(settings.ab_host, target),
            headers=headers,
            requests=requests,
            references=references or [],
            reference_inputs=reference_inputs,
            comparisons=budget_for(settings.consistency_rate, len(requests), _carrying(requests)),
            client_token_source=counter.source,
            access=access,
            form=form,
            limits=limits,
            max_kept=limits.max_body_bytes,
            schedule=getattr(dataset, "schedule", None),
            endpoint=endpoint,
            token_rows=rows,
            input_lengths=lengths,
        )
        plans[key] = plan
    return plan
