#!/usr/bin/env bash
# One script behind the README's two commands, for a fresh Debian 12 machine:
#   bash packaging/setup.sh run    install what is needed, build, and run the demo
#   bash packaging/setup.sh test   install what is needed, build, and run every test
set -euo pipefail
mode=${1:-run}
case "$mode" in
  run|test|screenshots) ;;
  *) echo "usage: $0 run|test|screenshots" >&2; exit 2 ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${TINYLOOP_BUILD_DIR:-build}

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

pkgs=(build-essential cmake ninja-build git nlohmann-json3-dev libgtest-dev
      qt6-base-dev libqcustomplot-dev pybind11-dev python3-dev python3-venv
      python3-fastapi python3-uvicorn xvfb clang
      libpcre2-dev pkg-config python3-jinja2)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing Debian packages: ${missing[*]}"
  $SUDO apt-get update
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
else
  echo "== Debian packages already installed"
fi

jobs=$(nproc 2>/dev/null || echo 2)
has_display() { [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]; }

# `run` builds only what it shows: the command line (engine + CLI, ~50 steps), plus the
# workbench when there is a display to open it on; no tests, and no CUDA back end unless a GPU is
# there. `test` and `screenshots` build everything (CI runs `test`), CUDA included when nvcc is found.
cuda=AUTO
targets=()
if [ "$mode" = run ]; then
  targets=(tinyloop_cli)
  if has_display; then targets+=(tinyloop_workbench); fi
  if ! nvidia-smi -L >/dev/null 2>&1; then cuda=OFF; fi
fi
# ccache, when the machine has it, makes a rebuild in a fresh clone mostly cache hits (as
# llama.cpp's build does); nothing here installs it.
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
echo "== configuring $build/ (CUDA back end: $cuda${launcher:+, compiler cache: ccache})"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTINYLOOP_CUDA="$cuda" "${launcher[@]}" >/dev/null
if [ ${#targets[@]} -gt 0 ]; then
  echo "== building ${targets[*]} with $jobs jobs (a few minutes on 2 cores; [done/total] below)"
  cmake --build "$build" -j "$jobs" --target "${targets[@]}"
else
  echo "== building everything with $jobs jobs (engine, CLI, workbench, tests; [done/total] below)"
  cmake --build "$build" -j "$jobs"
fi

case "$mode" in
  run)
    model=resources/models/tinyloop-kjv/model-f32.tinyloop
    if has_display && [ -x "$build/bin/tinyloop-workbench" ]; then
      echo "== opening the workbench on $model"
      exec "$build/bin/tinyloop-workbench" "$model"
    fi
    echo "== no display (DISPLAY/WAYLAND_DISPLAY unset): generating on the command line instead"
    # A prompt in the style of most of the training text (the King James Bible), decoded greedily
    # with a repetition penalty: deterministic (no seed), so every machine prints the same
    # continuation, and the penalty keeps greedy decoding out of its loops ("of the house of the
    # LORD, and ... the LORD"); sampling at temperature 0.8 wanders into invented words.
    echo "\$ tinyloop generate $model --prompt \"And the LORD spake unto Moses, saying,\" --max-tokens 48 --repetition-penalty 1.2"
    "$build/bin/tinyloop" generate "$model" --prompt "And the LORD spake unto Moses, saying," --max-tokens 48 \
      --repetition-penalty 1.2
    ;;
  screenshots)
    bash packaging/screenshots.sh "$build"
    ;;
  test)
    echo "== Python test environment ($build/pyenv)"
    if [ ! -x "$build/pyenv/bin/python" ]; then /usr/bin/python3 -m venv --system-site-packages "$build/pyenv"; fi
    "$build/pyenv/bin/pip" install --disable-pip-version-check -q -r tests/python/requirements.txt
    # The Hugging Face peer test's transformers + torch, through a wheel cache outside the
    # checkout (PyPI's torch pulls ~3 GB of CUDA runtime wheels; a fresh clone on this machine
    # then installs them from the cache instead of downloading them again). A failed install
    # fails test_hf_peer.py with the reason; it does not skip.
    wheels=${TINYLOOP_WHEEL_CACHE:-$HOME/.cache/tinyloop-wheels}
    peer=tests/python/requirements-peer.txt
    pipq=("$build/pyenv/bin/pip" --disable-pip-version-check -q)
    if ! "${pipq[@]}" install --no-index --find-links "$wheels" -r "$peer" 2>/dev/null; then
      echo "== downloading the peer test's wheels into $wheels (once per machine)"
      mkdir -p "$wheels"
      "${pipq[@]}" download -d "$wheels" -r "$peer" &&
        "${pipq[@]}" install --no-index --find-links "$wheels" -r "$peer" ||
        echo "== warning: $peer did not install; test_hf_peer.py will fail"
    fi
    # Group beam search's peer, transformers 4.x, in a folder of its own beside the venv (the
    # test runs it in a subprocess with that folder first on sys.path); reinstalled when the
    # pinned list changes.
    peer4=tests/python/requirements-peer-hf4.txt
    hf4="$build/hf4-peer"
    if ! cmp -s "$peer4" "$hf4/requirements.txt"; then
      rm -rf "$hf4"
      pip4=("${pipq[@]}" install --no-deps --target "$hf4" --no-index --find-links "$wheels" -r "$peer4")
      if ! "${pip4[@]}" 2>/dev/null; then
        "${pipq[@]}" download --no-deps -d "$wheels" -r "$peer4" && "${pip4[@]}" ||
          echo "== warning: $peer4 did not install; test_hf_peer_beams.py will fail"
      fi
      [ -d "$hf4/transformers" ] && cp "$peer4" "$hf4/requirements.txt"
    fi
    # llama.cpp's peer, llama-cpp-python: PyPI has only its source distribution, which builds
    # llama.cpp with CMake (~9.5 CPU-minutes, once). Its wheel is built once into a folder of the wheel
    # cache of its own, CPU only and portable (GGML_NATIVE off: the x86-64-v3 baseline, AVX2 + FMA,
    # that every x86-64 CI machine we may get has), so a cache that moves to another CPU still
    # runs; later venvs install from there. A failed build fails test_llama_cpp_peer.py with the
    # reason; it does not skip.
    lcpp=tests/python/requirements-llama-cpp.txt
    lver=$(sed -n 's/^llama-cpp-python==//p' "$lcpp")
    lwheels="$wheels/llama-cpp-x86-64-v3"
    lwheel=$(ls "$lwheels/llama_cpp_python-$lver-"*.whl 2>/dev/null | head -n 1 || true)
    if [ -z "$lwheel" ]; then
      echo "== building llama-cpp-python $lver's wheel into $lwheels (once per machine)"
      mkdir -p "$lwheels"
      CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_CUDA=OFF -DGGML_BLAS=OFF -DGGML_OPENMP=OFF -DLLAVA_BUILD=OFF \
-DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF" \
        CMAKE_BUILD_PARALLEL_LEVEL="$jobs" \
        "${pipq[@]}" wheel --no-deps --no-binary llama-cpp-python -w "$lwheels" -r "$lcpp" ||
        echo "== warning: llama-cpp-python did not build; test_llama_cpp_peer.py will fail"
      lwheel=$(ls "$lwheels/llama_cpp_python-$lver-"*.whl 2>/dev/null | head -n 1 || true)
    fi
    # Its dependencies (numpy, diskcache, jinja2, typing-extensions) through the ordinary cache.
    if [ -n "$lwheel" ] && ! "${pipq[@]}" install --no-index --find-links "$wheels" "$lwheel" 2>/dev/null; then
      "${pipq[@]}" download -d "$wheels" "$lwheel" &&
        "${pipq[@]}" install --no-index --find-links "$wheels" "$lwheel" ||
        echo "== warning: $lwheel did not install; test_llama_cpp_peer.py will fail"
    fi
    echo "== running the tests"
    ctest --test-dir "$build" --output-on-failure -j "$jobs"
    if [ "${TINYLOOP_SKIP_SANITIZERS:-0}" != 1 ]; then
      # The engine, CLI and their whole test suite again under AddressSanitizer +
      # UndefinedBehaviorSanitizer (any report fails the test that triggered it).
      san=${TINYLOOP_SAN_BUILD_DIR:-build-asan}
      echo "== AddressSanitizer + UndefinedBehaviorSanitizer: engine, CLI and their tests in $san/"
      cmake -S . -B "$san" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTINYLOOP_SANITIZE=ON \
        -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
        -DTINYLOOP_BUILD_UI=OFF -DTINYLOOP_BUILD_PYTHON=OFF -DTINYLOOP_CUDA=OFF "${launcher[@]}"
      cmake --build "$san" -j "$jobs"
      ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1 \
      UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        ctest --test-dir "$san" --output-on-failure -j "$jobs"
    fi
    ;;
esac
