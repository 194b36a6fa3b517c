"""What inputs the run sends, said once at its end: each User class's pool of prepared requests (per process),
whether its texts are each process's own, and whether its generated images recur (--image-pool) or are new for
every request (workload/pool.py's FreshImages), with the images this process sent. The console summary and the
JSON result's `inputs` say the same."""

from __future__ import annotations

import logging
from typing import Any

from locust.env import Environment
from locust.event import Events
from locust.runners import MasterRunner, WorkerRunner

from poolbench_locust.engine.plan import plan_for
from poolbench_locust.engine.user import endpoint_users
from poolbench_locust.json_sections import INPUTS_JSON, JsonSection, ResultEvents
from poolbench_locust.options import OptionError
from poolbench_locust.workload import images
from poolbench_locust.workload.pool import REFERENCE_EVERY, FreshImages

console = logging.getLogger("locust.stats_logger")

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["user_class", "pool_requests", "texts", "images"],
    "properties": {
        "user_class": {"type": "string"},
        "pool_requests": {"type": "integer", "minimum": 0, "description": "prepared requests, in each process"},
        "texts": {
            "enum": ["each process its own", "the dataset's"],
            "description": "random texts are drawn per worker; a dataset's records are the same in every process",
        },
        "images": {
            "enum": ["none", "new for every request", "recurring", "the dataset's"],
            "description": "generated images: new for every request (--image-pool 0) or recurring",
        },
        "distinct_images": {
            "type": ["integer", "null"],
            "description": "how many distinct images recur (--image-pool N, or a tiny image's bound); null: no bound",
        },
        "requests_sent_as_prepared": {
            "type": "integer",
            "minimum": 0,
            "description": "of the pool's requests, those always sent with the images they were prepared with "
            "(--repeat-ratio copied one of them)",
        },
        "requests_carrying_a_reference": {
            "type": "integer",
            "minimum": 0,
            "description": "of the pool's requests, those sent as prepared one take in `reference_every`, their "
            "answer then compared with a reference answer (docs/consistency.md); fresh images the other takes",
        },
        "reference_every": {"type": "integer", "minimum": 1},
    },
}
INPUTS_SCHEMA: dict[str, Any] = {
    "type": ["object", "null"],
    "description": "the inputs sent: each User class's pool, and whether its images recur",
    "required": ["classes", "images_sent_by_this_process"],
    "properties": {
        "classes": {"type": "array", "items": INPUT_SCHEMA},
        "images_sent_by_this_process": {
            "type": "integer",
            "minimum": 0,
            "description": "generated images the process that wrote the result sent (a master sends none)",
        },
    },
}


def described(environment: Environment) -> list[dict[str, Any]]:
    """Each User class's inputs as this process prepared them (a class whose options are refused: left out)."""
    classes = []
    for user_class in endpoint_users(environment):
        try:
            plan = plan_for(user_class, environment.parsed_options, environment.host, environment)
        except OptionError:
            continue
        settings, pool = plan.settings, plan.requests
        fresh = pool if isinstance(pool, FreshImages) else None
        if fresh is not None:
            kind = "recurring" if settings.image_pool else "new for every request"
        else:
            kind = "the dataset's" if any(b'"data:image/' in r.body for r in pool[:1]) else "none"
        classes.append(
            {
                "user_class": user_class.__name__,
                "pool_requests": len(pool),
                "texts": "each process its own" if settings.dataset == "random" else "the dataset's",
                "images": kind,
                "distinct_images": fresh.numbers.distinct() if fresh is not None else None,
                "requests_sent_as_prepared": fresh.sent_as_prepared if fresh is not None else 0,
                "requests_carrying_a_reference": sum(1 for r in pool if r.refs),
                "reference_every": REFERENCE_EVERY if fresh is not None else 1,
            }
        )
    return classes


def console_lines(environment: Environment) -> list[str]:
    lines = []
    for c in described(environment):
        line = f"Inputs: {c['user_class']}: a pool of {c['pool_requests']} requests in each process"
        line += f", its texts {c['texts']}"
        if c["images"] == "new for every request":
            bound = c["distinct_images"]
            line += "; images new for every request" + (f" (at most {bound} distinct: tiny images)" if bound else "")
            if kept := c["requests_sent_as_prepared"]:
                line += f", but {kept} of the pool's requests always as prepared (--repeat-ratio's copies)"
            if carrying := c["requests_carrying_a_reference"]:
                line += f"; {carrying} carry a reference input, sent as prepared one take in {REFERENCE_EVERY}"
        elif c["images"] == "recurring":
            line += f"; {c['distinct_images']} distinct images, recurring (--image-pool)"
        elif c["images"] == "the dataset's":
            line += "; images the dataset's"
        lines.append(line)
    if images.SENT.count:
        lines.append(f"Inputs: {images.SENT.count} generated images sent by this process")
    return lines


def json_fields(environment: Environment) -> dict[str, Any]:
    classes = described(environment)
    return {"inputs": {"classes": classes, "images_sent_by_this_process": images.SENT.count} if classes else None}


def json_section(sections: list[JsonSection], **_: Any) -> None:
    sections.append(JsonSection(INPUTS_JSON, json_fields, {"inputs": INPUTS_SCHEMA}, ("inputs",)))


def on_init(environment: Environment, **_: Any) -> None:
    if isinstance(environment.runner, WorkerRunner):
        return  # the master's (or the standalone process's) summary says it once

    @environment.events.quit.add_listener
    def summary(**_: Any) -> None:
        if lines := console_lines(environment):
            for line in lines:
                console.info(line)
            if isinstance(environment.runner, MasterRunner):
                console.info("Inputs: each worker sent its own images and texts; the counts above are the master's")
            console.info("")


def setup(events: Events, results: ResultEvents) -> None:
    events.init.add_listener(on_init)
    results.json_sections.add_listener(json_section)
