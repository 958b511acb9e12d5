#!/usr/bin/env bash
# The CUDA back end's check on a GPU machine: one prepared script for a session with a device.
# From the repository root:
#
#   kernels/cuda/fetch_debs.sh                  # once, on a machine with network
#   kernels/cuda/check_on_gpu.sh [BUILD_DIR]    # on the GPU machine (default build-gpu)
#
# The GPU machine has CUDA, CMake, ninja and a compiler but no Qt, no Python packages, no
# GoogleTest or nlohmann/json and no network: those two come from kernels/cuda/debs/*.deb
# (fetch_debs.sh), unpacked with dpkg -x into BUILD_DIR/deps. The script
#   1. says whether there is a device (nvidia-smi); without one it says so and stops (exit 3),
#   2. configures without the UI and the binding (sm_90) and builds the CLI and the CUDA tests,
#   3. runs the CUDA test label (ctest -L cuda: the op table's CUDA rows, the device-only ops,
#      whole-model parity, the public API on the device, vram_usage_bytes vs cudaMemGetInfo),
#   4. runs `tinyloop bench --backend cuda`: decode (single stream) and prefill for the bundled
#      model and the d512 random shape at q4, q8 and f32; the batch engine at 1/4/16; the CPU's
#      two-thread figure on the bundled model beside it,
#   5. prints one short table; logs go to $OUT (device runs) or BUILD_DIR/gpu-check.
# Record the result in kernels/cuda/DEVICE_RUNS.md. Exit status: 0 when every CUDA test passed.
# Dry runs without a GPU: TL_NO_DEVICE_OK=1 goes on past step 1 (the tests then skip and the
# benches are refused, which shows the plumbing); TL_SKIP_BUILD=1 uses BUILD_DIR as it is;
# TL_USE_DEBS=1 takes the .deb path even where the system has the libraries.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-gpu}
logs=${OUT:-$build/gpu-check}
mkdir -p "$build" "$logs"
jobs=$(nproc 2>/dev/null || echo 4)
t_start=$(date +%s)
say() { printf '== %s\n' "$*"; }

say "machine"
git -C "$root" rev-parse --short HEAD 2>/dev/null | sed 's/^/commit /' || echo "commit (no git)"
device=""
if command -v nvidia-smi > /dev/null 2>&1; then
  device=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)
  nvidia-smi -L > /dev/null 2>&1 || { echo "nvidia-smi: $device"; device=""; }
fi
if [ -z "$device" ]; then
  echo "NO CUDA DEVICE on this machine (nvidia-smi $(command -v nvidia-smi > /dev/null && echo 'finds no GPU' || echo 'is not installed')):"
  echo "the CUDA tests would all skip and tinyloop bench --backend cuda would be refused."
  if [ "${TL_NO_DEVICE_OK:-0}" != 1 ]; then
    echo "Run this on a machine with an NVIDIA GPU (TL_NO_DEVICE_OK=1 goes on anyway, for a dry run)."
    exit 3
  fi
  echo "(TL_NO_DEVICE_OK=1: going on for a dry run)"
else
  echo "device: $device" | tee "$logs/gpu.txt"
fi
command -v nvcc > /dev/null && nvcc --version | tail -1
cmake --version | head -1

# dependencies: the system's if present, else the carried .debs
prefix=$build/deps
cmake_deps=()
if [ "${TL_SKIP_BUILD:-0}" != 1 ] && { [ "${TL_USE_DEBS:-0}" = 1 ] || ! { [ -f /usr/include/gtest/gtest.h ] && [ -f /usr/include/nlohmann/json.hpp ]; }; }; then
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

t_build=0
if [ "${TL_SKIP_BUILD:-0}" != 1 ]; then
  say "configure + build"
  t0=$(date +%s)
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTINYLOOP_BUILD_UI=OFF -DTINYLOOP_CUDA=ON \
    -DTINYLOOP_BUILD_PYTHON=OFF -DCMAKE_CUDA_ARCHITECTURES="90-real;75-virtual" "${cmake_deps[@]}" >> "$logs/build.log" 2>&1 \
    || { tail -30 "$logs/build.log"; exit 2; }
  cmake --build "$build" -j "$jobs" --target tinyloop_cli test_backend_ops test_cuda_ops test_cuda_forward \
    test_cuda_engine test_cuda_fallback test_golden_forward >> "$logs/build.log" 2>&1 \
    || { grep -E "error|Error" "$logs/build.log" | head -40; exit 2; }
  t_build=$(( $(date +%s) - t0 ))
  echo "built in ${t_build}s"
fi

say "CUDA tests (ctest -L cuda)"
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
d512="d_model=512,n_heads=8,d_ff=1408,vocab=4096,n_pre=2,n_loop=2,loops=7"

say "tinyloop info --backend cuda"
"$cli" info "$model" --backend cuda 2>&1 | grep -E "backend|bytes|device" | tee "$logs/info.txt"

# bench NAME ARGS...: one bench run, its human table kept; a refusal is recorded as such.
: > "$logs/bench.txt"
bench() {
  local name=$1; shift
  printf '### %s: tinyloop bench %s\n' "$name" "$*" >> "$logs/bench.txt"
  timeout 300 "$cli" bench "$@" --no-machine > "$logs/bench-$name.txt" 2>&1
  local rc=$?
  cat "$logs/bench-$name.txt" >> "$logs/bench.txt"
  [ $rc -eq 0 ] || echo "$name: refused or failed (exit $rc): $(grep -m1 -iE 'error|not|refused' "$logs/bench-$name.txt" | head -c 300)"
}
say "tinyloop bench"
bench kjv-cuda "$model" --backend cuda --dtypes f32,q8,q4 --modes plain --tokens 256 --prompt-tokens 256 --repeat 3
bench kjv-cpu2 "$model" --backend cpu --threads 2 --dtypes f32,q8,q4 --modes plain --tokens 256 --prompt-tokens 256 --repeat 3
bench d512-cuda --random "$d512" --backend cuda --dtypes f32,q8,q4 --modes plain --tokens 256 --prompt-tokens 256 --repeat 3
bench kjv-batch-cuda "$model" --backend cuda --batch 1,4,16 --tokens 128 --prompt-tokens 32 --repeat 3
# the batch mode takes a file: the d512 shape is make-random's default
d512_q4=$build/d512-q4.tinyloop
"$cli" make-random "$d512_q4" --dtype q4 > /dev/null || echo "make-random failed"
bench d512-batch-cuda "$d512_q4" --backend cuda --batch 1,4,16 --tokens 128 --prompt-tokens 32 --repeat 3

say "table"
# The plain rows of each single-stream run: dtype, prefill tok/s, decode tok/s.
printf '%-10s %-5s %14s %14s\n' run dtype "prefill tok/s" "decode tok/s"
for name in kjv-cuda kjv-cpu2 d512-cuda; do
  awk -v run="$name" '$3 == "plain" && ($1 ~ /^(f32|f16|q8|q4|q2)$/) { printf "%-10s %-5s %14s %14s\n", run, $1, $5, $6; n++ }
                      END { if (!n) printf "%-10s %-5s %14s %14s\n", run, "-", "(no rows)", "(see bench.txt)" }' "$logs/bench-$name.txt"
done
for name in kjv-batch-cuda d512-batch-cuda; do
  awk -v run="$name" '$1 ~ /^[0-9]+$/ && NF >= 3 { printf "%-16s batch %-3s aggregate decode %s tok/s\n", run, $1, $2; n++ }
                      END { if (!n) printf "%-16s (no rows: see bench.txt)\n", run }' "$logs/bench-$name.txt"
done
echo "tests: ${summary:-no ctest summary} (ctest exit $ctest_rc; skipped: $n_skipped)"
echo "device: ${device:-none}; build ${t_build}s, total $(( $(date +%s) - t_start ))s; logs in $logs"
exit $ctest_rc
