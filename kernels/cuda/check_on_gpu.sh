#!/usr/bin/env bash
# The CUDA back end's check on a GPU machine (issue 6). From the repository root:
#
#   kernels/cuda/fetch_debs.sh                  # once, on a machine with network
#   kernels/cuda/check_on_gpu.sh [BUILD_DIR]    # on the GPU machine (default build-gpu)
#
# The GPU machine has CUDA, CMake, ninja and a compiler but no Qt, GoogleTest or nlohmann/json
# and no network: GoogleTest and nlohmann/json come from kernels/cuda/debs/*.deb (fetch_debs.sh),
# unpacked with dpkg -x into BUILD_DIR/deps. The script
#   1. configures and builds the engine, the CLI and the CUDA tests without the UI (sm_90),
#   2. runs the CUDA tests (ctest -L cuda) and the whole-model parity test,
#   3. tries `tinyloop bench --backend cuda` and says what it answered,
#   4. runs bench_cuda (the CUDA forward's own benchmark) on the bundled model (f32, q4) and on
#      the random shape of the CPU-speed issue (d_model 512, 2 pre + 2 loop layers x 7 loops, q4,
#      a 2,048-token prompt),
#   5. prints one short table; logs and JSON lines go to $OUT (device runs) or BUILD_DIR/gpu-check
#      (six files: gpu.txt build.log ctest.log tinyloop-bench-cuda.txt bench_cuda.jsonl bench_cuda.err).
# Record the result in kernels/cuda/DEVICE_RUNS.md. Exit status: 0 when every CUDA test passed.
# Dry runs on a machine without a GPU: TL_USE_DEBS=1 takes the .deb path even where the system
# has the libraries; TL_CONFIGURE_ONLY=1 stops after configuring.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-gpu}
logs=${OUT:-$build/gpu-check}
mkdir -p "$build" "$logs"
jobs=$(nproc 2>/dev/null || echo 4)
t_start=$(date +%s)
say() { printf '== %s\n' "$*"; }

say "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee "$logs/gpu.txt"
nvcc --version | tail -1
cmake --version | head -1
git -C "$root" rev-parse --short HEAD 2>/dev/null | sed 's/^/commit /' || echo "commit (no git)"

# 1. dependencies: the system's if present, else the carried .debs
prefix=$build/deps
cmake_deps=()
if [ "${TL_USE_DEBS:-0}" = 1 ] || ! { [ -f /usr/include/gtest/gtest.h ] && [ -f /usr/include/nlohmann/json.hpp ]; }; then
  shopt -s nullglob
  debs=("$root"/kernels/cuda/debs/*.deb)
  if [ ${#debs[@]} -eq 0 ]; then
    echo "no GoogleTest/nlohmann-json on this machine and no kernels/cuda/debs/*.deb: run kernels/cuda/fetch_debs.sh where there is network and carry kernels/cuda/debs" >&2
    exit 2
  fi
  mkdir -p "$prefix"
  for f in "${debs[@]}"; do dpkg -x "$f" "$prefix"; done
  # GoogleTest from its source (the googletest package) with this machine's compiler, so a
  # libstdc++ older than Debian's is no problem; else libgtest-dev's prebuilt library.
  if [ -f "$prefix/usr/src/googletest/CMakeLists.txt" ] && [ ! -f "$prefix/gtest/include/gtest/gtest.h" ]; then
    say "GoogleTest from source"
    cmake -S "$prefix/usr/src/googletest" -B "$prefix/gtest-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_INSTALL_PREFIX="$prefix/gtest" -DBUILD_GMOCK=OFF -DINSTALL_GTEST=ON > "$logs/build.log" 2>&1 &&
      cmake --build "$prefix/gtest-build" -j "$jobs" >> "$logs/build.log" 2>&1 &&
      cmake --install "$prefix/gtest-build" >> "$logs/build.log" 2>&1 ||
      echo "GoogleTest from source failed (see build.log); using libgtest-dev's prebuilt library"
  fi
  gtest_cfg=$(find "$prefix/gtest" -name GTestConfig.cmake 2>/dev/null | head -1)
  [ -n "$gtest_cfg" ] || gtest_cfg=$(find "$prefix/usr" -name GTestConfig.cmake | head -1)
  json_cfg=$(find "$prefix/usr" -name nlohmann_jsonConfig.cmake | head -1)
  cmake_deps=(-DGTest_DIR="$(dirname "$gtest_cfg")" -Dnlohmann_json_DIR="$(dirname "$json_cfg")")
  echo "GoogleTest: $(dirname "$gtest_cfg"); nlohmann/json: $(dirname "$json_cfg")"
fi

say "configure + build"
t0=$(date +%s)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTINYLOOP_BUILD_UI=OFF -DTINYLOOP_CUDA=ON \
  -DTINYLOOP_BUILD_PYTHON=OFF -DCMAKE_CUDA_ARCHITECTURES="90-real;75-virtual" "${cmake_deps[@]}" >> "$logs/build.log" 2>&1 \
  || { tail -30 "$logs/build.log"; exit 2; }
if [ "${TL_CONFIGURE_ONLY:-0}" = 1 ]; then
  grep -E "GTest|nlohmann|TinyLoop" "$logs/build.log" | head; echo "configured (TL_CONFIGURE_ONLY=1)"; exit 0
fi
cmake --build "$build" -j "$jobs" --target tinyloop_cli test_cuda_ops test_cuda_forward test_cuda_fallback bench_cuda \
  >> "$logs/build.log" 2>&1 || { grep -E "error|Error" "$logs/build.log" | head -40; exit 2; }
t_build=$(( $(date +%s) - t0 ))
echo "built in ${t_build}s"

say "CUDA tests"
ctest --test-dir "$build" -L cuda --output-on-failure > "$logs/ctest.log" 2>&1
ctest_rc=$?
summary=$(grep -E "tests passed|tests failed" "$logs/ctest.log" | tail -1)
n_skipped=$(grep -cE "^\s+[0-9]+ - .*\(Skipped\)$" "$logs/ctest.log" || true)
# the failures by name, then each one's first assertion message
grep -E "^\s+[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess aborted|Exception)\)" "$logs/ctest.log" | head -40
grep -E "Failure$|Expected|Which is|max\|err\||not written" "$logs/ctest.log" | head -30

cli=$build/bin/tinyloop
[ -x "$cli" ] || cli=$(find "$build" -type f -name tinyloop -perm -u+x | head -1)
model=$root/resources/models/tinyloop-kjv/model-f32.tinyloop
model_q4=$root/resources/models/tinyloop-kjv/model-q4.tinyloop

say "tinyloop bench --backend cuda"
"$cli" bench "$model" --backend cuda --tokens 64 --json > "$logs/tinyloop-bench-cuda.txt" 2>&1
bench_rc=$?
if [ $bench_rc -eq 0 ]; then
  cli_bench="ran (see tinyloop-bench-cuda.txt)"
else
  cli_bench="refused, exit $bench_rc: $(head -c 300 "$logs/tinyloop-bench-cuda.txt")"
  echo "$cli_bench"
  echo "(until the engine's generate dispatches to cuda_forward, bench_cuda below measures the CUDA forward)"
fi

say "bench_cuda"
random=$build/random-q4.tinyloop
"$cli" make-random "$random" --dtype q4 --max-seq-len 4096 > /dev/null
: > "$logs/bench_cuda.jsonl"
for spec in "$model|--prompt 256 --tokens 256" "$model_q4|--prompt 256 --tokens 256" "$random|--prompt 2048 --tokens 512"; do
  m=${spec%%|*}; a=${spec#*|}
  # shellcheck disable=SC2086
  timeout 300 "$build/tests/bench_cuda" "$m" $a >> "$logs/bench_cuda.jsonl" 2>> "$logs/bench_cuda.err" \
    || echo "bench_cuda $m failed: $(tail -1 "$logs/bench_cuda.err")"
done
[ -x "$build/tests/bench_cuda" ] || echo "bench_cuda binary not found under $build/tests"

say "table"
python3 - "$logs/bench_cuda.jsonl" <<'PY'
import json, sys, os
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"{'model':<22} {'L':>2} {'prefill tok/s':>13} {'cuBLAS-only':>11} {'ratio':>5} {'decode tok/s':>12} {'direct':>8} {'GB/s':>6} {'launch/tok':>10}")
for r in rows:
    print(f"{os.path.basename(r['model']):<22} {r['loops']:>2} {r['prefill_tok_s']:>13.0f} {r['cublas_only_tok_s']:>11.0f} "
          f"{r['prefill_vs_cublas']:>5.2f} {r['decode_graph_tok_s']:>12.0f} {r['decode_direct_tok_s']:>8.0f} "
          f"{r['decode_gb_s']:>6.1f} {r['launches_per_token']:>10}")
PY
echo "tests: ${summary:-no ctest summary} (ctest exit $ctest_rc; skipped: $n_skipped)"
echo "tinyloop bench --backend cuda: $cli_bench"
echo "build ${t_build}s, total $(( $(date +%s) - t_start ))s; logs in $logs"
exit $ctest_rc
