"""Where the workers' reference answers disagree (docs/consistency.md): in a distributed run each worker takes
its own references, alone, before its users start, and compares its answers with them; a server whose answer
depends on the connection (or on which replica behind a balancer it reaches) would pass every worker's check.
So each worker ships its references once to the master (name, a fingerprint of the input, the values), and
the master compares each worker's with the first worker's to report one: how many differ, by name, and the
worst cosine (vectors) or largest score difference (scores) between them.

With --consistency-reference every worker reads the same file: nothing is shipped, nothing can disagree.
Everything a worker ships is checked on the master (types, sizes, counts, finite values) and bounded.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any

from locust.env import Environment
from locust.event import Events
from locust.runners import MasterRunner, WorkerRunner

from poolbench_locust.consistency import reference_file
from poolbench_locust.consistency.measures import compare_scores, compare_vectors
from poolbench_locust.consistency.references import taking_of
from poolbench_locust.store import Slot

logger = logging.getLogger("poolbench_locust")

REPORT_KEY = "poolbench_reference_digest"
"""A worker's references in its report to the master: a list of [name, kind, input hash, values]."""
JSON_KEY = "references_disagree"
"""In the JSON result's `consistency`: the workers' references compared with the first worker's."""
MAX_ENTRIES = 512
"""The most references a worker ships (8 per User class by default)."""
MAX_VALUES = 16_384
"""The most values of one reference shipped: a longer one is not shipped."""
MAX_SHIPPED_VALUES = 1 << 20
"""The most values a worker ships in all (about 9 MB of msgpack): references beyond are not shipped."""
MAX_WORKERS_NAMED = 100
"""The most workers named per request name as disagreeing."""
HASH_DIGITS = 16

SCHEMA: dict[str, Any] = {
    "description": "A distributed run: each worker's reference answers compared with the first worker's "
    "(docs/consistency.md); absent when fewer than two workers shipped theirs (a local run, "
    "--consistency-reference).",
    "type": "object",
    "required": ["workers", "compared", "disagree", "names"],
    "properties": {
        "workers": {"type": "integer", "minimum": 2, "description": "workers whose references were compared"},
        "compared": {"type": "integer", "minimum": 0, "description": "references compared with the first's"},
        "disagree": {"type": "integer", "minimum": 0, "description": "of those, not identical to the first's"},
        "names": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["compared", "disagree"],
                "properties": {
                    "compared": {"type": "integer", "minimum": 0},
                    "disagree": {"type": "integer", "minimum": 0},
                    "cosine_min": {"type": "number", "minimum": -1, "maximum": 1},
                    "abs_diff_max": {"type": "number", "minimum": 0},
                    "workers": {
                        "type": "array",
                        "items": {"type": "integer", "minimum": 0},
                        "description": "the indexes of the workers whose references differ from the first's",
                    },
                },
            },
        },
    },
}

Entries = dict[tuple[str, str], tuple[str, tuple[float, ...]]]
"""(name, input hash) -> (kind, values)."""


@dataclasses.dataclass
class NameAgreement:
    compared: int = 0
    disagree: int = 0
    cosine_min: float | None = None
    abs_diff_max: float | None = None
    workers: list[int] = dataclasses.field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        found: dict[str, Any] = {"compared": self.compared, "disagree": self.disagree}
        if self.cosine_min is not None:
            found["cosine_min"] = self.cosine_min
        if self.abs_diff_max is not None:
            found["abs_diff_max"] = self.abs_diff_max
        if self.workers:
            found["workers"] = sorted(self.workers)
        return found


@dataclasses.dataclass
class Agreement:
    """A master's comparison of its workers' references, or a worker's generation of references shipped."""

    first: tuple[int, Entries] | None = None
    """The first worker to ship its references: its index and entries."""
    workers: int = 0
    names: dict[str, NameAgreement] = dataclasses.field(default_factory=dict)
    shipped: int = 0
    """A worker's: the generation of references (references.Taking.generation) shipped last."""

    def reset(self) -> None:
        self.first, self.workers, self.names = None, 0, {}

    def add(self, index: int, entries: Entries) -> None:
        self.workers += 1
        if self.first is None:
            self.first = (index, entries)
            return
        for (name, digest), (kind, values) in entries.items():
            if (theirs := self.first[1].get((name, digest))) is None or theirs[0] != kind:
                continue
            one = self.names.setdefault(name, NameAgreement())
            one.compared += 1
            try:
                comparison = (compare_scores if kind == "scores" else compare_vectors)(theirs[1], values)
            except ValueError:
                continue  # values were checked finite: a length the measures refuse counts as compared only
            if comparison.identical:
                continue
            one.disagree += 1
            if index not in one.workers and len(one.workers) < MAX_WORKERS_NAMED:
                one.workers.append(index)
            if comparison.cosine is not None:
                one.cosine_min = min(comparison.cosine, one.cosine_min if one.cosine_min is not None else 1.0)
            if comparison.abs_diff is not None:
                one.abs_diff_max = max(comparison.abs_diff, one.abs_diff_max or 0.0)

    def figures(self) -> dict[str, Any] | None:
        """The JSON result's `references_disagree`, or None when fewer than two workers shipped theirs."""
        if self.workers < 2:
            return None
        return {
            "workers": self.workers,
            "compared": sum(n.compared for n in self.names.values()),
            "disagree": sum(n.disagree for n in self.names.values()),
            "names": {name: self.names[name].figures() for name in sorted(self.names)},
        }


_AGREEMENT = Slot("consistency_agreement", Agreement)


def digest(environment: Environment) -> list[list[Any]]:
    """This worker's references as shipped: [name, kind, input hash, values], bounded."""
    entries: list[list[Any]] = []
    budget = MAX_SHIPPED_VALUES
    for name, taken in taking_of(environment).taken.items():
        for ref_id, values in sorted(taken.values.items()):
            if len(entries) >= MAX_ENTRIES or not 0 < len(values) <= min(MAX_VALUES, budget):
                continue
            try:
                key = reference_file.input_key(taken.kind, taken.inputs[ref_id])
            except (ValueError, IndexError):
                continue  # an input no file could hold either: nothing to fingerprint
            entries.append([name, taken.kind, reference_file.input_hash(key), [float(v) for v in values]])
            budget -= len(values)
    return entries


def entries_of(shipped: Any) -> Entries:
    """A worker's shipped references, checked; ValueError saying what is wrong."""
    if not isinstance(shipped, list) or len(shipped) > MAX_ENTRIES:
        raise ValueError(f"not a list of at most {MAX_ENTRIES} references")
    entries: Entries = {}
    total = 0
    for entry in shipped:
        if not isinstance(entry, list | tuple) or len(entry) != 4:
            raise ValueError("a reference is not [name, kind, input hash, values]")
        name, kind, digest_, values = entry
        if not isinstance(name, str) or not 0 < len(name) <= reference_file.MAX_NAME:
            raise ValueError("a reference's name is not a short string")
        if kind not in reference_file.KINDS:
            raise ValueError(f"a reference's kind is {str(kind)[:20]!r}")
        hexadecimal = isinstance(digest_, str) and all(c in "0123456789abcdef" for c in digest_)
        if not hexadecimal or len(digest_) != HASH_DIGITS:
            raise ValueError("a reference's input hash is not 16 hex digits")
        if not isinstance(values, list | tuple) or not 0 < len(values) <= MAX_VALUES:
            raise ValueError(f"a reference's values are not a list of 1 to {MAX_VALUES} numbers")
        total += len(values)
        if total > MAX_SHIPPED_VALUES:
            raise ValueError(f"more than {MAX_SHIPPED_VALUES} values in all")
        if not all(type(v) in (int, float) and math.isfinite(v) for v in values):
            raise ValueError("a reference's values are not all finite numbers")
        if (name, digest_) in entries:
            raise ValueError("a reference is shipped twice")
        entries[(name, digest_)] = (kind, tuple(float(v) for v in values))
    return entries


def merge(environment: Environment, client_id: str, shipped: Any) -> None:
    """A worker's shipped references, checked, compared with the first worker's."""
    try:
        entries = entries_of(shipped)
    except ValueError as e:
        logger.error("consistency: worker %.100s's reference answers refused: %s", client_id, e)
        return
    runner = environment.runner
    index = runner.get_worker_index(client_id) if isinstance(runner, MasterRunner) else 0
    _AGREEMENT.of(environment).add(index, entries)


def figures(environment: Environment) -> dict[str, Any] | None:
    return _AGREEMENT.of(environment).figures()


def with_agreement(environment: Environment, found: dict[str, Any] | None) -> dict[str, Any] | None:
    """The JSON result's `consistency` (each name's figures and the total's) with `references_disagree`
    added when workers' references were compared; then a total of 0 compared stands for none."""
    if (agreement := figures(environment)) is None:
        return found
    return {**(found or {"total": {"compared": 0}}), JSON_KEY: agreement}


def console_lines(environment: Environment) -> list[str]:
    """One line per request name whose references the workers' were compared on."""
    agreement = _AGREEMENT.of(environment)
    if (found := agreement.figures()) is None:
        return []
    first = agreement.first[0] if agreement.first is not None else 0
    lines = []
    for name, one in found["names"].items():
        if not one["disagree"]:
            lines.append(
                f"Reference answers of {name}: the {agreement.workers} workers' agree ({one['compared']} compared "
                f"with worker {first}'s)"
            )
            continue
        worst = (
            f"cosine min {one['cosine_min']:.6f}"
            if "cosine_min" in one
            else f"largest difference {one.get('abs_diff_max', float('nan')):.6g}"
        )
        lines.append(
            f"Reference answers of {name} DISAGREE between workers: {one['disagree']} of {one['compared']} differ "
            f"from worker {first}'s (workers {', '.join(map(str, one.get('workers', [])))}; {worst}): the server's "
            "answer depends on the connection or the replica"
        )
    if not found["names"]:
        lines.append(f"Reference answers: the {agreement.workers} workers' have no input in common to compare")
    return lines


def on_init(environment: Environment, runner: Any = None, **_: Any) -> None:
    agreement = _AGREEMENT.of(environment)
    if isinstance(runner, WorkerRunner):

        @environment.events.report_to_master.add_listener
        def report(client_id: str, data: dict[str, Any], **_: Any) -> None:
            taking = taking_of(environment)
            if taking.generation == agreement.shipped:
                return  # shipped already, or not all taken yet
            agreement.shipped = taking.generation
            if taking.path or not taking.taken:
                return  # the same file's for every worker, or none taken: nothing to compare
            data[REPORT_KEY] = digest(environment)

    elif isinstance(runner, MasterRunner):
        environment.events.test_start.add_listener(lambda **_: agreement.reset())

        @environment.events.worker_report.add_listener
        def on_report(client_id: str, data: dict[str, Any], **_: Any) -> None:
            if REPORT_KEY in data:
                merge(environment, client_id, data[REPORT_KEY])


def setup(events: Events) -> None:
    events.init.add_listener(on_init)
