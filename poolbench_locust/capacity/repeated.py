"""--find-capacity with --repeat N: the whole search run N times, each from its start rate and knowing
nothing of the others, so that the N answers are independent samples of the capacity; the capacity is
given as their mean and 95 % confidence interval (Student's t, repeats/student_t.py).

Why whole searches and not N measurements of one probe: the answer of a search is the figure a user
quotes, and its spread comes from every probe that steered the bisection, not from one rate's noise."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from typing import Any

from poolbench_locust.capacity.probes import CLIENT
from poolbench_locust.capacity.report import CSV_COLUMNS, Outcome, row
from poolbench_locust.repeats.student_t import mean_ci95

INTERVALS = ("requests_per_s", "input_tokens_per_s", "sequences_per_s")
"""The figures of the answer given as mean and interval (`<key>_ci95` in the JSON result's `capacity`)."""


@dataclass
class Searches:
    """The searches of one run, in order: one without --repeat, N with it."""

    planned: int
    outcomes: list[Outcome] = field(default_factory=list)

    def over(self) -> bool:
        """No further search: all ran, or one ended in a way another cannot change (the client was the
        limit, an error, the run time)."""
        if len(self.outcomes) >= self.planned:
            return True
        return bool(self.outcomes) and self.outcomes[-1].ended in ("client", "error", "cut short")

    def claimed(self) -> bool:
        """A capacity of the server is claimed only when every search claimed one."""
        return bool(self.outcomes) and all(o.claimed for o in self.outcomes)

    def failed(self) -> bool:
        return any(o.failed() for o in self.outcomes)

    def answers(self) -> list[dict[str, Any]]:
        return [o.as_dict() for o in self.outcomes]

    def intervals(self) -> dict[str, tuple[float, float, float] | None]:
        """Each figure's (mean, low, high) over the searches' answers; None with fewer than two answers or
        when a search claimed none (no capacity to average). Rates are never below zero: nor is the low end."""
        answers = self.answers()
        found: dict[str, tuple[float, float, float] | None] = {}
        for key in INTERVALS:
            values = [a[key] for a in answers]
            ci = mean_ci95(values) if self.claimed() and None not in values else None
            found[key] = None if ci is None else (ci[0], max(ci[1], 0.0), ci[2])
        return found

    def answer(self) -> str:
        """The one line that closes the console: the last search's own answer, or the repeated searches' mean."""
        if len(self.outcomes) < 2:
            return self.outcomes[-1].answer() if self.outcomes else ""
        found = self.intervals()["requests_per_s"]
        if found is None:
            not_claimed = [i + 1 for i, o in enumerate(self.outcomes) if not o.claimed]
            whose = self.outcomes[0].label
            return (
                f"Capacity{whose} over {len(self.outcomes)} searches: not claimed "
                f"(search {', '.join(map(str, not_claimed))} claimed none: see its answer above)."
            )
        mean, low, high = found
        each = ", ".join(f"{a['requests_per_s']:,.1f}" for a in self.answers())
        limits = {o.limited_by for o in self.outcomes if o.limited_by is not None}
        whose = self.outcomes[0].label
        return (
            f"Capacity{whose} over {len(self.outcomes)} searches: {mean:,.1f} requests/s "
            f"(95 % CI {low:,.1f} .. {high:,.1f}; answers {each}); "
            f"limited by {' and '.join(f'the {x}' for x in sorted(limits)) or 'nothing reached'}."
        )

    def console_lines(self, width: int | None = None) -> list[str]:
        lines: list[str] = []
        for number, outcome in enumerate(self.outcomes, 1):
            if len(self.outcomes) > 1:
                lines.append(f"Search {number} of {self.planned}")
            lines.extend(outcome.console_lines(width))
            lines.append("")
        if len(self.outcomes) > 1:
            lines.append(self.answer())
        return lines[:-1] if lines and not lines[-1] else lines

    def write_csv(self, path: str) -> None:
        """One row a probe; with --repeat, each row's search first."""
        repeated = self.planned > 1
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=(["Search"] if repeated else []) + list(CSV_COLUMNS))
            writer.writeheader()
            for number, outcome in enumerate(self.outcomes, 1):
                writer.writerows(({"Search": number} if repeated else {}) | row(p) for p in outcome.probes)

    def as_dict(self) -> dict[str, Any]:
        """The JSON result's `capacity`: one search's answer as it is; N searches' answers averaged, each
        kept in `searches`, the probes of all in `probes` (each with its `search`)."""
        answers = self.answers()
        if self.planned <= 1:
            return {**answers[-1], **{f"{key}_ci95": None for key in INTERVALS}, "searches": None}
        found = self.intervals()
        last = answers[-1]
        limits = [a["limited_by"] for a in answers]
        client = next((a for a in answers if a["limited_by"] == CLIENT), None)
        out = {
            **last,
            # the search that claimed none says which part of the client to raise
            "client_limit": client["client_limit"] if client is not None else None,
            "users_needed": client["users_needed"] if client is not None else None,
            "requests_per_s": round(found["requests_per_s"][0], 3) if found["requests_per_s"] else None,
            "limited_by": CLIENT if CLIENT in limits else next((x for x in reversed(limits) if x), None),
            "ended": "client" if CLIENT in limits else last["ended"],
            "answer": self.answer(),
            "probes": [{**p, "search": n} for n, a in enumerate(answers, 1) for p in a["probes"]],
            "searches": [
                {key: a[key] for key in ("requests_per_s", *INTERVALS[1:], "attainment", "limited_by", "ended")}
                for a in answers
            ],
        }
        for key in INTERVALS[1:]:
            out[key] = round(interval[0], 3) if (interval := found[key]) else None
        for key in INTERVALS:
            out[f"{key}_ci95"] = _pair(found[key])
        return out

    def repeats(self) -> dict[str, Any] | None:
        """The JSON result's top-level `repeats` and `<figure>_ci95` for a repeated search: each repeat is
        one search, its figures those of its answer (the passing probe of the highest rate)."""
        if self.planned <= 1 or not self.outcomes:
            return None
        rows: list[dict[str, Any]] = []
        for number, outcome in enumerate(self.outcomes, 1):
            best = outcome.best()
            rows.append(
                {
                    "repeat": number,
                    "seconds": round(sum(p.seconds for p in outcome.probes), 3),
                    "requests": best.requests if best else 0,
                    "failures": best.failures if best else 0,
                    "requests_per_s": round(best.rate, 3) if best and outcome.claimed else None,
                    "input_tokens_per_s": round(best.per_second(best.input_tokens), 1) if best else None,
                    "e2e_p50_ms": best.e2e_p50_ms if best else None,
                    "e2e_p99_ms": best.e2e_p99_ms if best else None,
                    "consistency": best.consistency if best else None,
                }
            )
        found = self.intervals()
        ci = {f"{key}_ci95": _pair(found[key]) for key in ("requests_per_s", "input_tokens_per_s")}
        latency = {f"{key}_ci95": _ci([r[key] for r in rows]) for key in ("e2e_p50_ms", "e2e_p99_ms")}
        return {"repeats": rows, **ci, **latency}


def _pair(found: tuple[float, float, float] | None) -> list[float] | None:
    """(mean, low, high) as the JSON result's [low, high]."""
    return None if found is None else [round(max(found[1], 0.0), 3), round(found[2], 3)]


def _ci(values: list[float | None]) -> list[float] | None:
    return _pair(mean_ci95([v for v in values if v is not None]))
