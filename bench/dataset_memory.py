"""Memory one process spends on its inputs: corpora of two sizes in every file form, and traces of two lengths.

    python bench/dataset_memory.py [--mb 64,256] [--trace-lines 20000,80000]

Each measurement is a fresh Python process that imports the plugin (and pyarrow/datasets when the form
needs them), resets its peak RSS (/proc/self/clear_refs), builds the plan of EmbeddingsUser for the
dataset (what every worker does at start) and reports its peak RSS growth (VmHWM) and the time it took.
Corpus lines are ~600 bytes of words, as MS MARCO passages are; the traces are mooncake-like shape lines
(input_length 128 words). A file form that streams costs the same at every size; a trace is held whole
(every line is sent), so its cost grows with its length: the per-line figure is printed.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORDS = "vector model server token batch query document search answer score rank embed latency memory".split()

CHILD = r"""
import json, sys, time
sys.path.insert(0, {root!r})
from gevent import monkey; monkey.patch_all()
import poolbench_locust.plugin
{preload}
from locust.argument_parser import get_parser
import poolbench_locust as pb
from poolbench_locust.engine.plan import plan_for

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) / 1024
options = get_parser().parse_args(["--dataset", {dataset!r}, "--batch-size", "1"])
before = status("VmRSS")
open("/proc/self/clear_refs", "w").write("5")  # VmHWM := VmRSS: the peak from here on
began = time.perf_counter()
plan = plan_for(pb.EmbeddingsUser, options)
took = time.perf_counter() - began
print(json.dumps({{"rss_mb": before, "peak_growth_mb": status("VmHWM") - before,
                   "kept_growth_mb": status("VmRSS") - before, "seconds": took, "requests": len(plan.requests)}}))
"""


def measure(dataset: str, preload: str = "") -> dict[str, float]:
    code = CHILD.format(root=str(ROOT), dataset=dataset, preload=preload)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900, check=False)
    if done.returncode:
        raise SystemExit(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def write_corpus(folder: Path, megabytes: int) -> dict[str, Path]:
    rng = random.Random(1)
    jsonl = folder / f"corpus_{megabytes}.jsonl"
    with jsonl.open("w") as f:
        written = 0
        while written < megabytes * 1_000_000:
            text = " ".join(rng.choices(WORDS, k=80))  # ~600 bytes
            line = json.dumps({"text": text}) + "\n"
            f.write(line)
            written += len(line)
    import pyarrow.json as pj
    import pyarrow.parquet as pq

    table = pj.read_json(jsonl)
    parquet = folder / f"corpus_{megabytes}.parquet"
    pq.write_table(table, parquet)
    import datasets

    saved = folder / f"corpus_{megabytes}_saved"
    datasets.Dataset(table).save_to_disk(str(saved))
    csv_path = folder / f"corpus_{megabytes}.csv"
    import pyarrow.csv as pc

    pc.write_csv(table, csv_path)
    return {"jsonl": jsonl, "csv": csv_path, "parquet": parquet, "save_to_disk": saved}


def write_trace(folder: Path, lines: int) -> Path:
    path = folder / f"trace_{lines}.jsonl"
    with path.open("w") as f:
        for i in range(lines):
            f.write(json.dumps({"timestamp": i * 10, "input_length": 128, "output_length": 20, "hash_ids": [i]}) + "\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", default="64,256", help="corpus sizes in MB")
    parser.add_argument("--trace-lines", default="20000,80000")
    args = parser.parse_args()
    preloads = {"parquet": "import pyarrow.parquet", "save_to_disk": "import datasets"}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print(f"{'source':<34} {'file MB':>8} {'peak +MB':>9} {'kept +MB':>9} {'s':>6}  requests")
        for mb in (int(x) for x in args.mb.split(",")):
            began = time.perf_counter()
            files = write_corpus(folder, mb)
            print(f"# wrote the {mb} MB corpus in 4 forms in {time.perf_counter() - began:.0f} s", flush=True)
            for form, path in files.items():
                r = measure(f"file:{path}", preloads.get(form, ""))
                size = sum(p.stat().st_size for p in ([path] if path.is_file() else path.rglob("*")))
                print(
                    f"{form + ' ' + str(mb) + ' MB':<34} {size / 1e6:>8.0f} {r['peak_growth_mb']:>9.1f} "
                    f"{r['kept_growth_mb']:>9.1f} {r['seconds']:>6.2f}  {r['requests']}",
                    flush=True,
                )
        for lines in (int(x) for x in args.trace_lines.split(",")):
            path = write_trace(folder, lines)
            r = measure(f"trace:{path}")
            print(
                f"{'trace ' + str(lines) + ' lines (128 words)':<34} {path.stat().st_size / 1e6:>8.1f} "
                f"{r['peak_growth_mb']:>9.1f} {r['kept_growth_mb']:>9.1f} {r['seconds']:>6.2f}  {r['requests']}  "
                f"({r['kept_growth_mb'] * 1024 / lines:.2f} kB a line)",
                flush=True,
            )


if __name__ == "__main__":
    main()
