"""How long a run must be for poolbench-compare to see a 5 % change beyond noise (docs/gate-ci.md).

    .venv/bin/python bench/ci_noise.py [--lengths 10,20,40,80] [--change 0.05] [--users 8]

For each run length T: one run against a mock that answers in 50 ms (40 ms to the headers, 10 ms of
body), then one against a mock slower by 5 % of the first run's mean E2E (the client's own time
included, so that the change the client sees is 5 %), both closed loop with the same users, each
with `--warmup 2` and `--json-result`; then poolbench-compare's own comparison of the two (the
bootstrap over seconds of poolbench_locust/results/noise.py). Printed per length and figure: the
change measured, the noise band a change must leave to be marked (3 standard errors of the
difference, as a % of the base), and whether the 5 % change was marked. A gate of
`--max-regression 5%` can only see a 5 % change at a length whose band is below 5 %.

The mock's own time is steady: what the band measures is the client's and the machine's noise (on a
shared machine, the other work's), which a real server's own noise adds to.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/ci_noise.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, Mock, machine_line, run_locust, table
from poolbench_locust.metrics.collector import AGGREGATED
from poolbench_locust.results import compare

FIGURES = ("Requests/s", "E2E mean", "E2E 50%", "E2E 90%")
TTFB_MS, BODY_MS = 40.0, 10.0


def one_run(mock: Mock, seconds: float, users: int, path: Path) -> None:
    args = ["--host", mock.url, "-u", str(users), "-r", str(users), "--warmup", "2", "--json-result", str(path)]
    args += ["--input-len", "16", "--batch-size", "4", "--no-preflight", "--no-consistency"]
    run_locust(ROOT / "locustfiles" / "embeddings.py", args, seconds + 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="10,20,40,80", help="run lengths in seconds (after the warm-up)")
    parser.add_argument("--change", type=float, default=0.05, help="how much slower the second mock is")
    parser.add_argument("--users", type=int, default=8)
    opts = parser.parse_args()
    lengths = [float(x) for x in opts.lengths.split(",")]
    print(machine_line())
    print(
        f"mock A: --ttfb-ms {TTFB_MS:g} --body-ms {BODY_MS:g}; "
        f"mock B: slower by {opts.change:.0%} of A's measured E2E mean; "
        f"-u {opts.users} closed loop, --warmup 2"
    )
    rows = []
    with (
        Mock("--ttfb-ms", f"{TTFB_MS:g}", "--body-ms", f"{BODY_MS:g}") as base_mock,
        tempfile.TemporaryDirectory() as tmp,
    ):
        for seconds in lengths:
            base, new = Path(tmp, f"base-{seconds:g}.json"), Path(tmp, f"new-{seconds:g}.json")
            one_run(base_mock, seconds, opts.users, base)
            e2e_mean = float(compare.load(str(base)).doc["total"]["locust"]["Average Response Time"])
            stretch = 1 + opts.change * e2e_mean / (TTFB_MS + BODY_MS)
            with Mock("--ttfb-ms", f"{TTFB_MS * stretch:.2f}", "--body-ms", f"{BODY_MS * stretch:.2f}") as slow_mock:
                one_run(slow_mock, seconds, opts.users, new)
            found = compare.compare([compare.load(str(base)), compare.load(str(new))])
            total = next(s for s in found if s.title == AGGREGATED)
            for title in FIGURES:
                c = total.changes[0][title]
                band = None if c.noise is None or not c.base else 100 * c.noise / abs(c.base)
                rows.append(
                    [
                        f"{seconds:g} s",
                        title,
                        compare.fmt(c.base),
                        compare.fmt(c.new),
                        compare.percent(c.relative),
                        "?" if band is None else f"{band:.1f} %",
                        "yes" if c.significant else "no",
                    ]
                )
            print(table(["length", "figure", "base", "new", "change", "band", "marked"], rows[-len(FIGURES) :]))
            sys.stdout.flush()
    print()
    print(table(["length", "figure", "base", "new", "change", "band", "marked"], rows))


if __name__ == "__main__":
    main()
