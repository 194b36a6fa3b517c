"""The client's peak RSS and CPU per request with 1, 8 and 64 generated images of 512x512 per request.

    python bench/image_memory.py [--users 4] [--seconds 8] [--image-size 512x512] [--image-format png]

Each case is one `locust --headless` process running EmbeddingsChatUser (one conversation of one text and
N images) against the bundled mock (its own process), which decodes every image it is sent. A case of no
images shows Locust's own footprint. Peak RSS is the process's own VmHWM (bench/common.py's
own_peak_rss_mb); CPU per request is the client's CPU seconds over the measured window divided by its
requests. The pool's figures (distinct requests, bytes of one body) come from the same plan built here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/image_memory.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import HERE, ROOT, Mock, machine_line, run_locust, table, write_result

CASES = (0, 1, 8, 64)
WARMUP_S = 2.0


def pool_figures(images: int, size: str, image_format: str) -> dict[str, Any]:
    """The pool the run prepares: how many distinct requests, and the bytes of one body."""
    from locust.argument_parser import get_parser

    import poolbench_locust as pb
    import poolbench_locust.plugin  # its options join Locust's parser
    from poolbench_locust.engine.plan import plan_for

    args = ["--images", str(images), "--image-size", size, "--image-format", image_format, "--input-len", "32"]
    plan = plan_for(pb.EmbeddingsChatUser, get_parser().parse_args(args))
    sizes = [len(r.body) for r in plan.requests]
    return {"pool_requests": len(sizes), "body_kb": round(sum(sizes) / len(sizes) / 1024, 1)}


def measure(users: int, seconds: float, size: str, image_format: str) -> dict[str, Any]:
    cases: dict[str, Any] = {}
    with Mock() as mock:
        for images in CASES:
            args = ["-u", str(users), "-r", str(users), "--host", mock.url, "--input-len", "32"]
            args += ["--images", str(images), "--image-size", size, "--image-format", image_format]
            run = run_locust(
                HERE / "poolbench_locustfile.py",
                args,
                seconds,
                env={"BENCH_USER_CLASS": "EmbeddingsChatUser"},
                warmup=WARMUP_S,
            )
            w = run.probe.get("window") or {}
            requests = int(w.get("requests", 0))
            cases[str(images)] = {
                **pool_figures(images, size, image_format),
                "requests": requests,
                "failures": int(w.get("failures", 0)),
                "requests_per_s": round(requests / w["time"], 1) if w.get("time") else None,
                "cpu_ms_per_request": round(1000 * w["cpu_s"] / requests, 3) if requests else None,
                "peak_rss_mb": run.probe.get("peak_rss_mb"),
            }
    return {"users": users, "seconds": seconds, "image_size": size, "image_format": image_format, "cases": cases}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--image-size", default="512x512")
    parser.add_argument("--image-format", default="png", choices=("png", "jpeg"))
    args = parser.parse_args()
    r = measure(args.users, args.seconds, args.image_size, args.image_format)
    print(
        f"EmbeddingsChatUser, {args.users} users, {args.seconds:g} s ({WARMUP_S:g} s warm-up), "
        f"{args.image_size} {args.image_format} images, against the bundled mock"
    )
    headers = ["images", "pool", "body KB", "requests", "failures", "req/s", "CPU ms/req", "peak RSS MB"]
    rows = [
        [
            images,
            c["pool_requests"],
            c["body_kb"],
            c["requests"],
            c["failures"],
            c["requests_per_s"],
            c["cpu_ms_per_request"],
            c["peak_rss_mb"],
        ]
        for images, c in r["cases"].items()
    ]
    print(table(headers, rows))
    print(machine_line())
    print(f"written: {write_result('image_memory', r).relative_to(ROOT)}")


if __name__ == "__main__":
    main()
