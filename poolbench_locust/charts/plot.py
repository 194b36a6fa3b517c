"""`poolbench-plot PREFIX`: a run's CSV files turned into the same charts after the fact, as SVG
images beside them (PREFIX_pooling_history.svg, PREFIX_stats_history.svg, PREFIX_sweep.svg)."""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Sequence
from typing import Any

from poolbench_locust.charts.figures import (
    KNEE_LATENCIES,
    KNEE_NOTES,
    KNEE_THROUGHPUTS,
    POOLING_CHARTS,
    STATS_CHARTS,
    Chart,
    knee_sheet,
    sheet,
    time_charts,
)

AGGREGATED = "Aggregated"


class PlotError(Exception):
    """A CSV file that cannot be drawn; its text is the one line the user sees."""


def _columns(charts: Sequence[Chart]) -> set[str]:
    return {"Timestamp", "Name"} | {column for _, _, lines in charts for column, _ in lines}


def read_records(path: str, wanted: set[str], aggregated_only: bool) -> list[dict[str, Any]]:
    """The rows of a CSV file, only the wanted columns (a day's history stays small), the Aggregated
    rows only where the file has a row per name too (--csv-full-history)."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            header = reader.fieldnames or []
            missing = sorted(wanted - set(header) - {"Name"})
            if not header or len(missing) == len(wanted - {"Name"}):
                raise PlotError(
                    f"{path}: not a file of this kind: none of its columns is one of {', '.join(sorted(wanted))}"
                )
            records = []
            for row in reader:
                if aggregated_only and "Name" in header and row.get("Name") != AGGREGATED:
                    continue
                records.append({k: row.get(k) for k in wanted})
            return records
    except FileNotFoundError:
        raise
    except OSError as e:
        raise PlotError(f"{path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise PlotError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except csv.Error as e:
        raise PlotError(f"{path}: not a CSV file ({e})") from None


def _time_sheet(prefix: str, kind: str, charts: Sequence[Chart], title: str) -> str | None:
    source = f"{prefix}_{kind}.csv"
    try:
        records = read_records(source, _columns(charts), aggregated_only=True)
    except FileNotFoundError:
        return None
    path = f"{prefix}_{kind}.svg"
    with open(path, "w", encoding="utf-8") as f:
        f.write(sheet(title, time_charts(records, charts)))
    return path


def _knee_sheet(prefix: str) -> str | None:
    source = f"{prefix}_sweep.csv"
    wanted = {column for column, _ in (*KNEE_THROUGHPUTS, *KNEE_LATENCIES)} | set(KNEE_NOTES)
    try:
        steps = read_records(source, wanted, aggregated_only=False)
    except FileNotFoundError:
        return None
    path = f"{prefix}_sweep.svg"
    with open(path, "w", encoding="utf-8") as f:
        f.write(knee_sheet(steps))
    return path


def plot(prefix: str) -> list[str]:
    """Every picture the run's CSV files give; the paths written."""
    written = [
        _time_sheet(prefix, "pooling_history", POOLING_CHARTS, "Pooling figures over time"),
        _time_sheet(prefix, "stats_history", STATS_CHARTS, "Locust's figures over time"),
        _knee_sheet(prefix),
    ]
    return [path for path in written if path is not None]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="poolbench-plot",
        description="Draw a run's CSV files (locust --csv PREFIX) as SVG charts beside them.",
    )
    parser.add_argument("prefix", help="the --csv PREFIX of the run")
    args = parser.parse_args(argv)
    try:
        written = plot(args.prefix)
    except PlotError as e:
        print(f"poolbench-plot: {e}", file=sys.stderr)
        return 2
    if not written:
        print(
            f"poolbench-plot: no {args.prefix}_pooling_history.csv, {args.prefix}_stats_history.csv "
            f"or {args.prefix}_sweep.csv to draw",
            file=sys.stderr,
        )
        return 2
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
