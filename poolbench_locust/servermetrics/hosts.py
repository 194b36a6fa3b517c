"""--server-metrics with --ab-host: which host each URL scraped is of, so that each host's metrics are read from
its own URLs and reconciled with its own requests (the names marked [A] and [B]).

A URL is A's or B's when it says so (`A=URL`, `B=URL`), or when it is on the host's own server (the scheme,
host and port of --host or --ab-host: vLLM, TEI, Infinity and SGLang serve /metrics beside their routes). Any
other URL (a dcgm-exporter, a metrics port of its own) must say whose it is: with two hosts a URL of neither
would be ambiguous, and its counters reconciled with the wrong host's requests. `auto` reads each host's
own /metrics, where it answers."""

from __future__ import annotations

from poolbench_locust.engine.ab import same_host
from poolbench_locust.options import OptionError
from poolbench_locust.options.parsers import HOST_LABELS
from poolbench_locust.urls import shown_url

OPTION = "--server-metrics"
SIDES = ("A", "B")


def _origin(url: str) -> str:
    """The server of a URL: its scheme, host and port, without its path."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"


def targets(mode: str, a_host: str | None, b_host: str | None) -> list[tuple[str, str | None]]:
    """(URL, host: "A", "B", or None without --ab-host) of each URL to scrape; OptionError naming
    --server-metrics when a URL's host cannot be told."""
    if mode == "off":
        return []
    if b_host is None:
        if mode == "auto":
            return [(a_host.rstrip("/") + "/metrics", None)] if a_host else []
        return [(u.strip(), None) for u in mode.split(",")]
    if mode == "auto":
        return [(host.rstrip("/") + "/metrics", side) for host, side in ((a_host, "A"), (b_host, "B")) if host]
    found: list[tuple[str, str | None]] = []
    for given in (u.strip() for u in mode.split(",")):
        if given.startswith(HOST_LABELS):
            found.append((given[2:].strip(), given[0]))
            continue
        hosts = ((a_host, "A"), (b_host, "B"))
        of = [side for host, side in hosts if host and same_host(_origin(given), _origin(host))]
        if len(of) != 1:
            where = "both --host's server and --ab-host's" if of else "neither --host's server nor --ab-host's"
            raise OptionError(
                OPTION,
                f"{shown_url(given)} is on {where}: with --ab-host, say whose it is, A={shown_url(given)} or "
                f"B={shown_url(given)} (URLs separated by commas)",
            )
        found.append((given, of[0]))
    return found
