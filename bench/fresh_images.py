"""What taking a request with images of its own costs (workload/pool.py's FreshImages), beside taking a prepared one.

    python bench/fresh_images.py [--takes 20000]

For each case, EmbeddingsChatUser's pool is built as a run builds it, then `pool[i]` is taken in a loop as a user
takes its next request: once from the pool as it is (a fresh image in every request), once from a plain list of
the same templates (what the pool cost before: one index). Microseconds per request taken, the median of 5
rounds; no server, no network: the cost is the client's CPU alone.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/fresh_images.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CASES = (
    ("png", "512x512", 1, 1),
    ("jpeg", "512x512", 1, 1),
    ("png", "512x512", 8, 1),
    ("png", "512x512", 1, 8),
    ("jpeg", "512x512", 8, 8),
    ("png", "64x64", 1, 1),
)
"""(format, size, images per conversation, conversations per request)."""
ROUNDS = 5


def per_take_us(pool: list, takes: int) -> float:
    size = len(pool)
    rounds = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        i = 0
        for _ in range(takes):
            i = (i + 1) % size
            pool[i]
        rounds.append((time.perf_counter() - start) / takes * 1e6)
    return statistics.median(rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--takes", type=int, default=20_000)
    args = parser.parse_args()

    from locust.argument_parser import get_parser

    import poolbench_locust as pb
    import poolbench_locust.plugin
    from poolbench_locust.engine.plan import plan_for

    print(f"{'format':<6} {'size':>8} {'images':>6} {'batch':>5} {'body KB':>8} {'fresh µs':>9} {'list µs':>8}")
    for image_format, size, per, batch in CASES:
        options = ["--images", str(per), "--image-size", size, "--image-format", image_format]
        options += ["--input-len", "32", "--batch-size", str(batch), "--no-consistency"]
        plan = plan_for(pb.EmbeddingsChatUser, get_parser().parse_args(options))
        fresh = plan.requests
        templates = list(fresh)
        body_kb = sum(len(r.body) for r in templates) / len(templates) / 1024
        print(
            f"{image_format:<6} {size:>8} {per:>6} {batch:>5} {body_kb:>8.1f} "
            f"{per_take_us(fresh, args.takes):>9.2f} {per_take_us(templates, args.takes):>8.2f}"
        )


if __name__ == "__main__":
    main()
