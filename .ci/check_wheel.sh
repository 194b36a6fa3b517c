#!/usr/bin/env bash
# The built wheel as a user installs it: `check_wheel.sh PYTHON WHEEL`. A fresh venv in a temporary folder
# outside the repository, the wheel installed there with its dependencies (from the package index, or pip's
# cache), then, from that folder (so that nothing of the repository is on the path):
# - poolbench_locust is imported from the venv, with lazyjson's C pass loaded from the wheel;
# - 3 s of headless load on the bundled mock (no --host: the locustfile starts it in-process), whose start
#   log must say "JSON answers validated by the C pass", and whose JSON result must say `validator: "c"`.
set -euo pipefail
# PYTHONPATH unset: a path the caller set (the repository's) would shadow the installed package, and its
# egg-info would make pip take the package for installed already.
unset PYTHONPATH
python=$1
wheel=$(realpath "$2")
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
"$python" -m venv venv
venv/bin/python -m pip install --quiet "$wheel"
venv/bin/python - "$work/venv" <<'EOF'
import sys
from pathlib import Path

import poolbench_locust
from poolbench_locust import _jsonscan, lazyjson

venv = Path(sys.argv[1]).resolve()
for module in (poolbench_locust, _jsonscan):
    assert venv in Path(module.__file__).resolve().parents, f"{module.__name__} imported from {module.__file__}"
assert lazyjson.validator() == "c", lazyjson.validator()
print(f"check_wheel: poolbench_locust from {poolbench_locust.__file__}, the C pass from {_jsonscan.__file__}")
EOF
cp "$repo/locustfiles/demo.py" demo.py
# The repository's demo (EmbeddingsUser, RerankUser), a few seconds; the start log goes to stderr.
venv/bin/locust -f demo.py --headless -u 4 -r 4 -t 3s --only-summary --json-result result.json 2>log.txt \
    || { cat log.txt >&2; echo "check_wheel: the run failed" >&2; exit 1; }
grep -c "JSON answers validated by the C pass" log.txt | grep -qx 1 \
    || { cat log.txt >&2; echo "check_wheel: the start log does not say the C pass once" >&2; exit 1; }
venv/bin/python -c 'import json, sys; doc = json.load(open("result.json")); sys.exit(doc["validator"] != "c" or doc["total"]["locust"]["Request Count"] < 1)' \
    || { echo "check_wheel: the JSON result does not say validator c, or no request was sent" >&2; exit 1; }
echo "check_wheel: $(basename "$wheel") installed outside the repository: the C pass loaded and reported"
