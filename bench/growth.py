"""What grows in a long run, found in minutes: one Locust process on a simulated clock, fed synthetic requests.

    python bench/growth.py [--minutes 30] [--rate 680] [--every 5] [--plain]

A soak (bench/soak.py) needs half an hour to say *that* a process grows; this says *what* grows. It runs
`locust --headless` in this process with this file as its locustfile, poolbench-locust loaded (with the
soak's `--json-result`, `--csv`, `--prometheus-port`, scraped every 10 s, and the bundled mock as its host,
so the server metrics are scraped too), and one User that fires the request events of `--rate` requests/s
(lognormal E2E and TTFB, 2 % failures of three messages, two request names, the context the engine
writes) on a simulated clock: `time.time` and `gevent.sleep` follow it, so every greenlet of Locust and of
the plugin (history, series, Locust's history and CSV writer, the exporter, the client load, the server
metrics' scrapes) ticks as in a real run, and `--minutes` of traffic take what their events cost. With
`--plain`, poolbench-locust is not loaded: Locust's own share. tracemalloc snapshots every `--every`
simulated minutes; at the end it prints, over the last two thirds of the run, the allocation sites that
grew most (file:line, MB per simulated minute) and the object types whose count grew (gc).
"""

from __future__ import annotations

import argparse
import gc
import heapq
import itertools
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROLE_ENV = "GROWTH_CONFIG"
"""JSON of the run's settings: set, this file is the locustfile of the measured run."""


def _locustfile_role(config: dict[str, Any]) -> None:
    import gevent
    import gevent.event
    from locust import User, task

    tracemalloc.start(config["frames"])
    real_sleep = gevent.sleep
    start = 1_800_000_000.0
    clock = {"now": start}
    waiters: list[tuple[float, int, gevent.event.Event]] = []
    order = itertools.count()

    def fake_time() -> float:
        return clock["now"]

    def fake_sleep(seconds: float = 0, ref: bool = True) -> None:
        if seconds <= 0:
            real_sleep(0)
            return
        woken = gevent.event.Event()
        heapq.heappush(waiters, (clock["now"] + seconds, next(order), woken))
        woken.wait()

    def advance(to: float) -> None:
        clock["now"] = to
        while waiters and waiters[0][0] <= to:
            heapq.heappop(waiters)[2].set()

    def keep_ticking() -> None:
        """After the measured run: the clock follows real time again (10x), so that stopping and quitting,
        which sleep, end."""
        while True:
            real_sleep(0.01)
            advance(clock["now"] + 0.1)

    time.time = fake_time  # type: ignore[assignment]
    gevent.sleep = fake_sleep

    snapshots: list[tuple[float, str, dict[str, int], float]] = []

    def rss_mb() -> float:
        with open("/proc/self/status") as f:
            return int(f.read().split("VmRSS:")[1].split()[0]) / 1024

    def snapshot() -> None:
        """Kept on disk (tracemalloc's own objects would be traced too), loaded at the end, tracing stopped."""
        gc.collect()
        types = dict(Counter(type(o).__name__ for o in gc.get_objects()))
        path = f"{config['out']}.{len(snapshots)}"
        tracemalloc.take_snapshot().dump(path)
        snapshots.append((clock["now"] - start, path, types, rss_mb()))

    rng = random.Random(1)
    names = ("/v1/embeddings", "/v1/embeddings [long]")
    messages = (
        "Connection reset by peer mid-body after 120 bytes",
        "HTTP 500: mock failure",
        "Read timed out",
    )

    class Driver(User):
        """Fires every request event of the run, advancing the simulated clock between them."""

        @task
        def drive(self) -> None:
            fire = self.environment.events.request.fire
            rate, seconds, every = config["rate"], config["minutes"] * 60, config["every"] * 60
            port = config.get("prometheus_port")
            step = 1.0 / rate
            snapshot()
            for second in range(int(seconds)):
                for i in range(rate):
                    advance(start + second + i * step)
                    name = names[0] if rng.random() < 0.8 else names[1]
                    e2e = rng.lognormvariate(math.log(4.0 if name == names[0] else 9.0), 0.5)
                    failed = rng.random() < 0.02
                    context: dict[str, Any] = {"sequences": 1, "request_bytes": 120}
                    if not failed:
                        ttfb = e2e * rng.uniform(0.7, 0.98)
                        context.update(ttfb_ms=ttfb, input_tokens=5, token_source="server")
                    fire(
                        request_type="POST",
                        name=name,
                        response_time=e2e,
                        response_length=0 if failed else 1500,
                        exception=Exception(rng.choice(messages)) if failed else None,
                        context=context,
                        response=None,
                        url="http://127.0.0.1" + name,
                        start_time=clock["now"],
                    )
                    if i % 100 == 99:
                        real_sleep(0)
                real_sleep(0.0005)  # real I/O (the scrapes, the exporter's server) gets its turn
                if port and second % 10 == 0:
                    gevent.spawn(_scrape, port)
                if (second + 1) % every == 0:
                    advance(start + second + 1)
                    snapshot()
                    print(f"simulated {(second + 1) / 60:.1f} min, RSS {snapshots[-1][3]:.1f} MB", file=sys.stderr)
            advance(start + seconds)
            _report(snapshots, config)
            gevent.spawn(keep_ticking)
            self.environment.runner.quit()

    globals()["Driver"] = Driver


def _scrape(port: int) -> None:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            resp.read()
    except OSError as e:
        print(f"scrape failed: {e}", file=sys.stderr)


def _report(snapshots: list, config: dict[str, Any]) -> None:
    """Growth between the snapshot a third into the run and the last: per site, per traceback, per type."""
    tracemalloc.stop()
    snapshots = [(t, tracemalloc.Snapshot.load(path), Counter(types), mb) for t, path, types, mb in snapshots]
    first = snapshots[len(snapshots) // 3]
    last = snapshots[-1]
    minutes = (last[0] - first[0]) / 60
    out: dict[str, Any] = {"minutes": minutes, "rss": [(round(t / 60, 1), round(mb, 2)) for t, _, _, mb in snapshots]}
    total = sum(s.size_diff for s in last[1].compare_to(first[1], "filename"))
    out["traced_mb_per_min"] = round(total / minutes / 1e6, 4)
    out["traced_mb"] = [
        (round(t / 60, 1), round(sum(s.size for s in snap.statistics("filename")) / 1e6, 3))
        for t, snap, _, _ in snapshots
    ]
    rows = []
    for stat in last[1].compare_to(first[1], "lineno")[:25]:
        frame = stat.traceback[0]
        rows.append((f"{frame.filename}:{frame.lineno}", round(stat.size_diff / minutes / 1e3, 2), stat.count_diff))
    out["by_line_kb_per_min"] = rows
    tracebacks = []
    for stat in last[1].compare_to(first[1], "traceback")[:8]:
        tracebacks.append(
            {
                "kb_per_min": round(stat.size_diff / minutes / 1e3, 2),
                "count_diff": stat.count_diff,
                "stack": [f"{f.filename}:{f.lineno}" for f in stat.traceback],
            }
        )
    out["by_traceback"] = tracebacks
    types = last[2].copy()
    types.subtract(first[2])
    out["types_grown"] = [(k, v) for k, v in types.most_common(15) if v > 0]
    Path(config["out"]).write_text(json.dumps(out, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--rate", type=int, default=680)
    parser.add_argument("--every", type=float, default=5)
    parser.add_argument("--frames", type=int, default=8)
    parser.add_argument("--plain", action="store_true", help="poolbench-locust not loaded: Locust alone")
    parser.add_argument("--host", default="", help="a server to scrape /metrics of (the bundled mock's URL)")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    from devsupport.ports import free_port

    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or f"{tmp}/growth.json"
        port = None if args.plain else free_port()
        config = {
            "minutes": args.minutes,
            "rate": args.rate,
            "every": args.every,
            "frames": args.frames,
            "plain": args.plain,
            "prometheus_port": port,
            "out": out,
        }
        cmd = ["nice", "-n", "19", sys.executable, "-m", "locust", "-f", str(Path(__file__).resolve()), "--headless"]
        cmd += [
            "--only-summary",
            "-u",
            "1",
            "-r",
            "1",
            "--csv",
            f"{tmp}/run",
            "--host",
            args.host or "http://127.0.0.1:9",
        ]
        if not args.plain:
            cmd += ["--json-result", f"{tmp}/result.json", "--prometheus-port", str(port)]
            cmd += ["--prometheus-host", "127.0.0.1", "--no-preflight", "--no-consistency"]
            if not args.host:
                cmd += ["--server-metrics", "off"]
        root = str(Path(__file__).resolve().parent.parent)
        env = {**os.environ, ROLE_ENV: json.dumps(config), "PYTHONPATH": root}
        subprocess.run(cmd, env=env, cwd=root, check=False)
        print(Path(out).read_text())


if os.environ.get(ROLE_ENV):
    _config = json.loads(os.environ[ROLE_ENV])
    if not _config["plain"]:
        import poolbench_locust.plugin  # noqa: F401  (the plugin, loaded)
    _locustfile_role(_config)
elif __name__ == "__main__":
    main()
