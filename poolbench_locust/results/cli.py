"""poolbench-compare: the command line of results.compare (tables as text) and results.page (--html)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from poolbench_locust.results.compare import (
    EXIT_REGRESSION,
    EXIT_USAGE,
    ResultError,
    compare,
    load,
    parse_limit,
    regressions,
    text_tables,
)
from poolbench_locust.results.page import html_page


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="poolbench-compare",
        description="Compare poolbench-locust JSON results (--json-result): the first is the base.",
    )
    parser.add_argument("base", help="the base run's JSON result")
    parser.add_argument("new", nargs="+", help="runs to compare against the base")
    parser.add_argument("--html", metavar="FILE", help="also write the tables and the runs' curves to this HTML page")
    parser.add_argument(
        "--max-regression",
        type=parse_limit,
        metavar="PERCENT",
        help="exit 1 when a change beyond noise makes a figure worse by more than this (e.g. 5%%)",
    )
    args = parser.parse_args(argv)
    try:
        runs = [load(p) for p in [args.base, *args.new]]
    except ResultError as e:
        print(f"poolbench-compare: {e}", file=sys.stderr)
        return EXIT_USAGE
    found = compare(runs)
    sys.stdout.write(text_tables(found, runs))
    if args.html:
        try:
            Path(args.html).write_text(html_page(found, runs, args.max_regression), encoding="utf-8")
        except OSError as e:
            print(f"poolbench-compare: --html {args.html}: {e.strerror or e}", file=sys.stderr)
            return EXIT_USAGE
    if args.max_regression is not None and (bad := regressions(found, runs, args.max_regression)):
        for line in bad:
            print(f"Regression: {line}", file=sys.stderr)
        return EXIT_REGRESSION
    return 0


if __name__ == "__main__":
    sys.exit(main())
