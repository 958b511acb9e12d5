#!/usr/bin/env bash
# The CUDA back end's check on a GPU machine, sized for a 15-minute device budget: nothing is
# built there. Two halves:
#
#   kernels/cuda/check_on_gpu.sh --pack [BUILD_DIR]     # HERE, after building the CUDA targets
#   kernels/cuda/check_on_gpu.sh                        # THERE, through the device `run` tool
#   kernels/cuda/check_on_gpu.sh --rehearse [WORK_DIR]  # anywhere: the device part stubbed
#
# --pack (default BUILD_DIR build) strips the CLI, the CUDA test programs and bench_cuda of a
# build configured with -DTINYLOOP_CUDA=ON (same nvcc as the device: sm_90 code + compute_75
# PTX), adds the C/C++ runtime libraries they load (this machine's glibc and libstdc++, used
# there only when the binaries do not start with the device's own), and writes one xz archive,
# build-devcheck/bins.tar.xz (git-ignored by build*/): the `carry` of the device call. It prints
# the archive's size, which must leave the tree under the tool's 64 MiB.
#
# On the device (no argument) the script, under one overall deadline TL_CHECK_BUDGET_S (default
# 300 s: with the machine's start (1-2 min) the call stays under 7 minutes, and a rerun
# still fits the 15-minute budget):
#   1. names the machine (nvidia-smi) and unpacks the archive to /tmp/devcheck,
#   2. runs each test program once with a --gtest_filter group (not one process per test):
#      the op tests under compute-sanitizer memcheck where it works (else plainly, saying so;
#      the fast step's kernels, CudaFastOps, included), the fast step's kernels again plainly
#      (fast-ops), the op table's CUDA rows ("cuda" and "cuda-fast"), whole-model parity, the
#      fast step against the reference step (fast-step: the same bits with fuse/pdl/pinned,
#      the near-tie rule with split attention), the public API on the device without the
#      VRAM test, then the VRAM test alone (it reads the device's free memory, so nothing else
#      may run beside it), the golden forward's CUDA case, the fallback tests,
#   3. runs bench_cuda (JSON line: the reference and the fast step, launches per token of each) and `tinyloop bench --backend cuda` (plain prefill and
#      single-stream decode) on the bundled model and on the d512 shape at f32, q8 and q4, and
#      the CPU's two threads on the bundled model beside it, and the batch engine's aggregate
#      decode at batch 1, 8 and 32 on the device and on the CPU's two threads,
#   4. prints the table for kernels/cuda/DEVICE_RUNS.md.
# Every step runs under `timeout` with what is left of the budget (and its own cap), so a hang
# costs its cap, never the session. Everything goes to ONE log file, $OUT/devcheck.log (the tool
# brings back at most 8 files); the table is printed on stdout as well.
#
# --rehearse runs the device part end to end here with TL_DEVICE_STUB=1: each GPU program's
# execution is replaced by a stub that prints what the real one prints (gtest summaries,
# bench_cuda's JSON, tinyloop bench's rows), one step hangs (TL_STUB_HANG, default
# test_cuda_forward) to exercise the timeouts, and the budget is shrunk so the whole rehearsal
# takes seconds. It checks the log, the single file, the timeout report and the table (CTest
# cuda_device_check_rehearsal). Exit status: 0 when every test group passed (device), 0 when
# the rehearsal's checks held.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
self="$root/kernels/cuda/check_on_gpu.sh"

# The carried programs: name in the build -> what runs them.
programs="bin/tinyloop tests/test_cuda_ops tests/test_cuda_forward tests/test_cuda_engine tests/test_cuda_fallback
tests/test_backend_ops tests/test_golden_forward tests/bench_cuda"

# ---- --pack: here ---------------------------------------------------------------------------
if [ "${1:-}" = "--pack" ]; then
  build=${2:-$root/build}
  stage=$(mktemp -d)
  mkdir -p "$stage/devcheck/bin" "$stage/devcheck/lib"
  for p in $programs; do
    # the build's own program first: a build also holds staged copies (packaging/deb/root/usr/bin)
    f="$build/$p"
    [ -f "$f" ] && [ -x "$f" ] || f=$(find "$build" -type f -name "$(basename "$p")" -perm -u+x -not -path "*/packaging/*" 2>/dev/null | head -1)
    if [ -z "$f" ]; then
      echo "pack: $(basename "$p") is not built in $build (cmake --build $build --target $(basename "$p"))" >&2
      rm -rf "$stage"
      exit 2
    fi
    strip -o "$stage/devcheck/bin/$(basename "$p")" "$f"
  done
  # the runtime libraries the programs load (not the driver's, not CUDA's: those are the device's)
  for f in "$stage"/devcheck/bin/*; do ldd "$f"; done | awk '/=>/ { print $3 } /ld-linux/ { print $1 }' | sort -u |
    while read -r lib; do [ -f "$lib" ] && cp -L "$lib" "$stage/devcheck/lib/"; done
  git -C "$root" rev-parse --short HEAD > "$stage/devcheck/COMMIT" 2>/dev/null || echo unknown > "$stage/devcheck/COMMIT"
  # the tests find the bundled models under the source directory and the CLI at the path they
  # were compiled with (TL_SOURCE_DIR, TL_CLI_PATH): the device recreates those paths
  src_dir=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
  # the path the tests were compiled with (TL_CLI_PATH): the build's bin/tinyloop, never a staged
  # copy such as packaging/deb/root/usr/bin/tinyloop (a device run's fallback tests found no CLI)
  cli_path=$build/bin/tinyloop
  [ -x "$cli_path" ] || cli_path=$(find "$build" -type f -name tinyloop -perm -u+x -not -path "*/packaging/*" | head -1)
  printf '%s\n%s\n' "${src_dir:-$root}" "$(cd "$(dirname "$cli_path")" && pwd)/tinyloop" > "$stage/devcheck/PATHS"
  (cd "$stage/devcheck/bin" && ls -l) | awk 'NR > 1 { printf "  %-22s %6.1f MiB stripped\n", $9, $5 / 1048576 }'
  mkdir -p "$root/build-devcheck"
  tar -C "$stage" -cf - devcheck | xz -T0 -6 > "$root/build-devcheck/bins.tar.xz"
  raw=$(du -sb "$stage/devcheck" | cut -f1)
  rm -rf "$stage"
  packed=$(stat -c %s "$root/build-devcheck/bins.tar.xz")
  tree=$(git -C "$root" ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
  awk -v r="$raw" -v p="$packed" -v t="$tree" 'BEGIN { m = 1048576;
    printf "pack: %.1f MiB of programs and libraries -> build-devcheck/bins.tar.xz %.1f MiB; with the tracked tree (%.1f MiB): %.1f of 64 MiB\n", r / m, p / m, t / m, (p + t) / m }'
  exit 0
fi

# ---- --rehearse: here, the device part stubbed ------------------------------------------------
if [ "${1:-}" = "--rehearse" ]; then
  work=${2:-$(mktemp -d)}
  hang=${TL_STUB_HANG:-test_cuda_forward}
  rm -rf "$work"
  mkdir -p "$work/out"
  t0=$(date +%s.%N)
  OUT="$work/out" TL_DEVICE_STUB=1 TL_STUB_HANG=$hang TL_CHECK_BUDGET_S=${TL_CHECK_BUDGET_S:-20} \
    TL_STEP_CAP_S=${TL_STEP_CAP_S:-2} bash "$self" > "$work/stdout.txt" 2>&1
  rc=$?
  wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  cat "$work/stdout.txt"
  fail=0
  check() { if eval "$2"; then echo "rehearsal ok: $1"; else echo "rehearsal FAILED: $1"; fail=1; fi; }
  n_files=$(find "$work/out" -type f | wc -l)
  check "one file under \$OUT (found $n_files)" '[ "$n_files" = 1 ] && [ -s "$work/out/devcheck.log" ]'
  check "the hung step was stopped by its timeout and reported" 'grep -qE "^TIMEOUT forward after|^\| test +\| forward +\| TIMEOUT" "$work/stdout.txt"'
  check "the exit status says a group failed (the hung one): $rc" '[ "$rc" = 1 ]'
  check "every test group has a row" 'for g in ops oom fast-ops ops-table forward fast-step engine vram golden fallback; do grep -qE "^\| test +\| $g " "$work/stdout.txt" || exit 1; done'
  check "the sanitizer row says how the op tests ran" 'grep -qE "^\| test +\| ops .*(memcheck|plain)" "$work/stdout.txt"'
  check "bench_cuda rows for kjv and d512 at f32/q8/q4" 'for c in kjv-f32 kjv-q8 kjv-q4 d512-f32 d512-q8 d512-q4; do grep -qE "^\| bench_cuda +\| $c " "$work/stdout.txt" || exit 1; done'
  check "bench_cuda rows show the fast step beside the reference" 'grep -qE "^\| bench_cuda +\| d512-q4 .*fast 4000.0 .*86 launches" "$work/stdout.txt"'
  check "bench_cuda rows show the persistent step" 'grep -qE "^\| bench_cuda +\| d512-q4 .*persist 5000.0 \(no prefetch 4500.0\) \| 6 launches \| barrier 1.50 us \(2/SM 2.00\) \| cluster barrier 8: 0.40 us, 16: refused" "$work/stdout.txt"'
  check "bench_cuda rows name the shape, a shrunk prompt said" 'grep -qE "^\| bench_cuda +\| kjv-q4 +\| p512 t128 \(shrunk\) \| prefill" "$work/stdout.txt" && grep -qE "^\| bench_cuda +\| d512-q4 +\| p512 t128 \| prefill" "$work/stdout.txt"'
  check "the batch engine's rows hold its three batch sizes" 'grep -qE "^\| tinyloop bench +\| kjv-batch +\| batch 1 100.0 tok/s \(1.00x\); batch 8 800.0 tok/s \(8.00x\); batch 32 3200.0 tok/s \(32.00x\);" "$work/stdout.txt"'
  check "no raw JSON and no negative rate in the table" '! grep -E "^\| bench_cuda" "$work/stdout.txt" | grep -qE "\{|[ :]-[0-9]"'
  check "tinyloop bench rows (cuda, the CPU beside it, the fast step)" 'for c in kjv-cuda d512-cuda kjv-cpu2 kjv-batch kjv-bcpu2 d512-fast kjv-fast d512-pers kjv-pers; do grep -qE "^\| tinyloop bench +\| $c " "$work/stdout.txt" || exit 1; done'
  check "the log holds every step and the table" 'grep -q "== table" "$work/out/devcheck.log" && grep -q "== bench_cuda" "$work/out/devcheck.log"'
  check "the budget line" 'grep -qE "^device time: [0-9]+ s of [0-9]+ s budget" "$work/stdout.txt"'
  echo "rehearsal wall time $wall s"
  check "the rehearsal took seconds ($wall s)" 'awk -v w="$wall" "BEGIN { exit !(w < 60) }"'
  # the overall budget: a first step that hangs past it leaves every later step skipped, and
  # the whole run ends at the budget, not at the sum of the steps' caps
  rm -rf "$work/out2" && mkdir -p "$work/out2"
  t1=$(date +%s)
  OUT="$work/out2" TL_DEVICE_STUB=1 TL_STUB_HANG=compute-sanitizer TL_CHECK_BUDGET_S=3 TL_STEP_CAP_S=30 bash "$self" > "$work/stdout2.txt" 2>&1
  spent=$(( $(date +%s) - t1 ))
  check "a spent budget skips the rest ($(grep -c '^SKIPPED' "$work/stdout2.txt") steps skipped, ${spent}s)" \
    'grep -q "^SKIPPED test_cuda_fallback\|^SKIPPED fallback" "$work/stdout2.txt" && [ "$spent" -le 12 ]'
  exit $fail
fi

# ---- the stub: what each GPU program prints, without a GPU ------------------------------------
# Called as `bash check_on_gpu.sh --stub PROGRAM ARGS...` (so `timeout` can run it).
if [ "${1:-}" = "--stub" ]; then
  prog=$2; shift 2
  if [ "$prog" = "${TL_STUB_HANG:-}" ]; then echo "[ RUN      ] (stub) $prog hangs"; exec sleep 3600; fi
  case $prog in
    compute-sanitizer) echo "========= COMPUTE-SANITIZER"; prog=$(basename "$2"); shift 2 ;;
  esac
  case $prog in
    bench_cuda)
      m=$(basename "$1" .tinyloop)
      note=""; case $m in model-*) note="prompt 512 shrunk to 256: the model's context is 512" ;; esac
      echo "{\"model\":\"$1\",\"device\":\"stub\",\"loops\":4,\"prompt\":512,\"tokens\":128,\"note\":\"$note\",\"prefill_tok_s\":1000.0,\"prefill_kernel_tok_s\":500.0,\"cublas_only_tok_s\":1500.0,\"prefill_vs_cublas\":0.667,\"decode_graph_tok_s\":2000.0,\"decode_direct_tok_s\":1000.0,\"bytes_per_token\":1000000,\"decode_gb_s\":2.0,\"launches_per_token\":134,\"decode_fast_tok_s\":4000.0,\"fast_gb_s\":4.0,\"fast_launches_per_token\":86,\"decode_logits_tok_s\":1500.0,\"decode_fast_logits_tok_s\":3500.0,\"decode_persist_tok_s\":5000.0,\"decode_persist_nopf_tok_s\":4500.0,\"persist_launches_per_token\":6,\"barrier_us_1sm\":1.50,\"barrier_us_2sm\":2.00,\"cluster_barrier_us_8\":0.40,\"cluster_barrier_us_16\":-1.00,\"weights_device_bytes\":1,\"session_device_bytes\":1}" ;;
    tinyloop)
      if [ "$1" = make-random ]; then echo "(stub) wrote $2"; exit 0; fi
      if [[ " $* " == *" --batch "* ]]; then
        echo "continuous batching: $2, L=4, 32-token prompts, 64 greedy tokens each, kv f32, 1 thread, median of 2"
        echo " batch   decode tok/s  per seq tok/s  vs first      tok/CPU-s  vs first   steps     KV bytes"
        for b in 1 8 32; do printf '%6d %14.1f %14.1f %8.2fx %14.1f %8.2fx %7d %12s\n' "$b" "$((b * 100)).0" 100.0 "$b" 100.0 1.00 64 "1.0 MiB"; done
        exit 0
      fi
      echo "dtype thr mode         depth  prefill/s  decode/s  speedup    GB/s   %bw  bound/s  GFLOP/s  %peak  accept  acc/cyc  same"
      for d in f32 q8 q4; do echo "$d      1 plain         4.00      111.1     222.2    1.00x    1.00     -        -     1.00      -       -        -  yes"; done ;;
    *)
      echo "[==========] Running 3 tests from 1 test suite. (stub $prog $*)"
      echo "[  PASSED  ] 3 tests." ;;
  esac
  exit 0
fi

# ---- the device part ------------------------------------------------------------------------
stub=${TL_DEVICE_STUB:-0}
budget=${TL_CHECK_BUDGET_S:-300}
step_cap=${TL_STEP_CAP_S:-0}  # 0: each step's own cap below; >0: every step capped at this (rehearsal)
out=${OUT:-$root/build-devcheck/out}
mkdir -p "$out"
log=$out/devcheck.log
: > "$log"
t_start=$(date +%s)
say() { printf '== %s\n' "$*" | tee -a "$log"; }
left() { echo $(( budget - ($(date +%s) - t_start) )); }
rows=()   # the table's rows: "| kind | case | result | figures |"
fails=0

# run_step CAP NAME CMD...: CMD under timeout min(CAP, what is left), its output into the log;
# sets step_rc (124: timed out) and step_s.
run_step() {
  local cap=$1 name=$2; shift 2
  [ "$step_cap" -gt 0 ] && cap=$step_cap
  local l; l=$(left)
  [ "$l" -lt "$cap" ] && cap=$l
  local t0; t0=$(date +%s)
  if [ "$cap" -le 0 ]; then
    echo "SKIPPED $name: the budget is spent" | tee -a "$log"
    step_rc=125; step_s=0; return
  fi
  printf -- '-- %s (timeout %ss): %s\n' "$name" "$cap" "$*" >> "$log"
  timeout -k 5 "$cap" "$@" >> "$log" 2>&1
  step_rc=$?
  step_s=$(( $(date +%s) - t0 ))
  if [ $step_rc -eq 124 ] || [ $step_rc -eq 137 ]; then
    step_rc=124
    echo "TIMEOUT $name after ${cap}s" | tee -a "$log"
  fi
}

say "machine"
device="stub (TL_DEVICE_STUB=1: no GPU program runs)"
if [ "$stub" != 1 ]; then
  device=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)
  if ! nvidia-smi -L >> "$log" 2>&1; then
    echo "NO CUDA DEVICE on this machine (nvidia-smi: $device): this is the GPU half of the check" | tee -a "$log"
    exit 3
  fi
  command -v nvcc > /dev/null && nvcc --version | tail -1 >> "$log"
fi
echo "device: $device" | tee -a "$log"

# the carried programs
dc=/tmp/devcheck/devcheck
runner=()
if [ "$stub" = 1 ]; then
  bin() { echo "$1"; }
else
  archive=$root/build-devcheck/bins.tar.xz
  if [ ! -f "$archive" ]; then
    echo "no $archive: run kernels/cuda/check_on_gpu.sh --pack where the CUDA build is, and carry build-devcheck" | tee -a "$log"
    exit 2
  fi
  rm -rf /tmp/devcheck && mkdir -p /tmp/devcheck && tar -C /tmp/devcheck -xJf "$archive"
  # the programs' commit (the archive's; the device tree's HEAD is another checkout)
  echo "commit of the carried programs: $(cat "$dc/COMMIT" 2>/dev/null || echo unknown)" | tee -a "$log"
  # the device's own C/C++ runtime when the programs start with it, else the carried one
  if ! "$dc/bin/tinyloop" --help > /dev/null 2>&1; then
    ld=$(ls "$dc"/lib/ld-linux-x86-64.so.* 2>/dev/null | head -1)
    runner=("$ld" --library-path "$dc/lib")
    echo "the programs run with the carried C/C++ runtime ($("$dc/bin/tinyloop" --help 2>&1 | head -1))" | tee -a "$log"
  fi
  bin() { echo "$dc/bin/$1"; }
  # the paths compiled into the tests: the source tree (models) and the CLI (fallback tests)
  src_dir=$(sed -n 1p "$dc/PATHS"); cli_path=$(sed -n 2p "$dc/PATHS")
  if [ -n "$src_dir" ] && [ ! -e "$src_dir/resources/models" ]; then
    mkdir -p "$(dirname "$src_dir")" && rm -rf "$src_dir" && ln -s "$root" "$src_dir"
  fi
  if [ -n "$cli_path" ] && [ ! -x "$cli_path" ]; then
    mkdir -p "$(dirname "$cli_path")"
    printf '#!/bin/sh\nexec %s "%s" "$@"\n' "${runner[*]:-}" "$dc/bin/tinyloop" > "$cli_path"
    chmod +x "$cli_path"
  fi
  echo "tests' paths: sources $src_dir -> $(readlink -f "$src_dir"), CLI $cli_path" >> "$log"
fi
export stub self dc
# runner is an array: passed to the sub-shells of timeout as a string
export TL_RUNNER="${runner[*]:-}"
run_prog() {  # run_prog CAP NAME PROGRAM ARGS...
  local cap=$1 name=$2 p=$3; shift 3
  run_step "$cap" "$name" bash -c 'r=($TL_RUNNER); if [ "$stub" = 1 ]; then exec bash "$self" --stub "$0" "$@"; else exec "${r[@]}" "$dc/bin/$0" "$@"; fi' "$p" "$@"
}

# ---- tests, one process per group -----------------------------------------------------------
# test_group NAME CAP PROGRAM FILTER: the group's gtest summary into the table
test_group() {
  local name=$1 cap=$2 p=$3 filter=$4 how=${5:-}
  local before; before=$(( $(wc -l < "$log") + 1 ))
  run_prog "$cap" "$name" "$p" --gtest_filter="$filter" --gtest_brief=1
  local res
  res=$(tail -n +"$before" "$log" | grep -E "^\[  (PASSED|FAILED|SKIPPED) +\]|tests? ran" | tr '\n' ' ' | sed 's/  */ /g' | cut -c1-80)
  if [ $step_rc -eq 0 ]; then res="pass: ${res:-no summary}"
  elif [ $step_rc -eq 124 ]; then res="TIMEOUT"; fails=$((fails + 1))
  elif [ $step_rc -eq 125 ]; then res="NOT RUN: the budget was spent"; fails=$((fails + 1))
  else res="FAIL (exit $step_rc): ${res:-see log}"; fails=$((fails + 1)); fi
  rows+=("$(printf '| test           | %-10s | %-68s | %4ss %s |' "$name" "$res" "$step_s" "$how")")
}

say "tests"
# The op tests under compute-sanitizer's memcheck where the device allows it (on gVisor it
# answers "Device not supported"): then once more plainly, saying so. The test that asks for
# 2^50 bytes on purpose runs outside memcheck (its own group, oom): memcheck counts the
# cudaMalloc it makes fail as an API error and exits 9 (the first H200 run), while every
# memory-access error of the other tests still fails the group.
oom_test='CudaDevice.OutOfMemoryIsAnError'
how=memcheck
before=$(( $(wc -l < "$log") + 1 ))
if [ "$stub" = 1 ]; then
  run_step 150 ops bash "$self" --stub compute-sanitizer --tool test_cuda_ops "--gtest_filter=-$oom_test" --gtest_brief=1
elif command -v compute-sanitizer > /dev/null; then
  run_step 150 ops compute-sanitizer --tool memcheck --error-exitcode 9 ${runner[@]+"${runner[@]}"} "$(bin test_cuda_ops)" "--gtest_filter=-$oom_test" --gtest_brief=1
else
  step_rc=1
  echo "compute-sanitizer is not installed" >> "$log"
fi
if [ "$stub" != 1 ] && [ $step_rc -ne 0 ] && [ $step_rc -ne 124 ] &&
   ! tail -n +"$before" "$log" | grep -qE "^\[  (PASSED|FAILED) +\]"; then
  echo "compute-sanitizer refused or failed before any test ran: the op tests run plainly" | tee -a "$log"
  how=plain
  test_group ops 90 test_cuda_ops "-$oom_test" plain
else
  res=$(tail -n +"$before" "$log" | grep -E "^\[  (PASSED|FAILED) +\]|ERROR SUMMARY" | tr '\n' ' ' | cut -c1-60)
  if [ $step_rc -eq 0 ]; then res="pass: $res"; elif [ $step_rc -eq 124 ]; then res=TIMEOUT; fails=$((fails + 1)); else res="FAIL (exit $step_rc): $res"; fails=$((fails + 1)); fi
  rows+=("$(printf '| test           | %-10s | %-68s | %4ss memcheck |' ops "$res" "$step_s")")
fi
test_group oom 30 test_cuda_ops "$oom_test"
test_group fast-ops 60 test_cuda_ops '*CudaFastOps*'
test_group ops-table 60 test_backend_ops '*Cuda*'
test_group forward 120 test_cuda_forward '*-*CudaFastStep*:*CudaFastSwitchOnDevice*'
test_group fast-step 120 test_cuda_forward '*CudaFastStep*:*CudaFastSwitchOnDevice*'
test_group engine 120 test_cuda_engine '-*Vram*'
test_group vram 45 test_cuda_engine '*Vram*'          # alone: it reads the device's free memory
test_group golden 45 test_golden_forward '*Cuda*'
test_group fallback 30 test_cuda_fallback '*'

# ---- benches --------------------------------------------------------------------------------
say "bench_cuda"
models=$root/resources/models/tinyloop-kjv
rand=/tmp/devcheck/d512
mkdir -p "$rand"
for dt in f32 q8 q4; do
  run_prog 30 "make-random d512 $dt" tinyloop make-random "$rand/d512-$dt.tinyloop" --dtype "$dt"
done
bench_cuda_case() {  # NAME MODEL
  local before; before=$(( $(wc -l < "$log") + 1 ))
  run_prog 45 "bench_cuda $1" bench_cuda "$2" --prompt 512 --tokens 256 --reps 2
  local j; j=$(tail -n +"$before" "$log" | grep -m1 '^{"model"')
  if [ -n "$j" ]; then
    local f
    f=$(echo "$j" | sed -E 's/.*"prefill_tok_s":([0-9.]+).*"cublas_only_tok_s":([0-9.]+),"prefill_vs_cublas":([0-9.]+),"decode_graph_tok_s":([0-9.]+),"decode_direct_tok_s":([0-9.]+).*"decode_gb_s":([0-9.]+),"launches_per_token":([0-9]+),"decode_fast_tok_s":([0-9.]+),"fast_gb_s":([0-9.]+),"fast_launches_per_token":([0-9]+),"decode_logits_tok_s":([0-9.]+),"decode_fast_logits_tok_s":([0-9.]+).*/prefill \1 | cuBLAS-only \2 | ratio \3 | decode graph \4 | direct \5 | \6 GB\/s | \7 launches | fast \8 | \9 GB\/s | FASTL launches | +logits ref LREF fast LFAST/' )
    # sed -E has nine groups: the last three fields by name
    local fl lr lf p1 p2 pl b1 b2
    fl=$(echo "$j" | sed -nE 's/.*"fast_launches_per_token":([0-9]+).*/\1/p')
    lr=$(echo "$j" | sed -nE 's/.*"decode_logits_tok_s":([0-9.]+).*/\1/p')
    lf=$(echo "$j" | sed -nE 's/.*"decode_fast_logits_tok_s":([0-9.]+).*/\1/p')
    p1=$(echo "$j" | sed -nE 's/.*"decode_persist_tok_s":([0-9.]+).*/\1/p')
    p2=$(echo "$j" | sed -nE 's/.*"decode_persist_nopf_tok_s":([0-9.]+).*/\1/p')
    b1=$(echo "$j" | sed -nE 's/.*"barrier_us_1sm":([0-9.]+).*/\1/p')
    b2=$(echo "$j" | sed -nE 's/.*"barrier_us_2sm":([0-9.]+).*/\1/p')
    pl=$(echo "$j" | sed -nE 's/.*"persist_launches_per_token":([0-9]+).*/\1/p')
    local c8 c16  # the cluster barrier alone (-1: the device refused that cluster size)
    c8=$(echo "$j" | sed -nE 's/.*"cluster_barrier_us_8":(-?[0-9.]+).*/\1/p')
    c16=$(echo "$j" | sed -nE 's/.*"cluster_barrier_us_16":(-?[0-9.]+).*/\1/p')
    if [ "${c8:0:1}" = "-" ]; then c8=refused; elif [ -n "$c8" ]; then c8="$c8 us"; fi
    if [ "${c16:0:1}" = "-" ]; then c16=refused; elif [ -n "$c16" ]; then c16="$c16 us"; fi
    f=${f/FASTL/$fl}; f=${f/LREF/$lr}; f=${f/LFAST/$lf}
    f="$f | persist ${p1:-?} (no prefetch ${p2:-?}) | ${pl:-?} launches | barrier ${b1:-?} us (2/SM ${b2:-?}) | cluster barrier 8: ${c8:-?}, 16: ${c16:-?}"
    # a line the pattern did not match (a field missing, a non-number) is named, not printed raw
    [ "${f:0:1}" = "{" ] && f="unparsed bench_cuda JSON: see the log"
    local pt; pt=$(echo "$j" | sed -nE 's/.*"prompt":([0-9]+),"tokens":([0-9]+).*/p\1 t\2/p')
    echo "$j" | grep -q '"note":"[^"]' && pt="$pt (shrunk)"
    f="$pt | $f"
    rows+=("$(printf '| bench_cuda     | %-10s | %-68s | %4ss |' "$1" "$f" "$step_s")")
  else
    rows+=("$(printf '| bench_cuda     | %-10s | %-68s | %4ss |' "$1" "$( [ $step_rc -eq 124 ] && echo TIMEOUT || echo "no result (exit $step_rc): see log")" "$step_s")")
  fi
}
for dt in f32 q8 q4; do bench_cuda_case "kjv-$dt" "$models/model-$dt.tinyloop"; done
for dt in f32 q8 q4; do bench_cuda_case "d512-$dt" "$rand/d512-$dt.tinyloop"; done

say "tinyloop bench"
tl_bench() {  # NAME ARGS...: plain rows: dtype, prefill tok/s, decode tok/s
  local name=$1; shift
  local before; before=$(( $(wc -l < "$log") + 1 ))
  run_prog 75 "tinyloop bench $name" tinyloop bench "$@" --modes plain --tokens 256 --prompt-tokens 256 --repeat 2 --no-machine
  local r
  r=$(tail -n +"$before" "$log" | awk '$3 == "plain" && $1 ~ /^(f32|f16|bf16|q8|q4|q2)$/ { printf "%s prefill %s decode %s; ", $1, $5, $6 }')
  [ -n "$r" ] || r=$( [ $step_rc -eq 124 ] && echo TIMEOUT || echo "no rows (exit $step_rc): see log")
  rows+=("$(printf '| tinyloop bench | %-10s | %-68s | %4ss |' "$name" "$r" "$step_s")")
}
tl_bench kjv-cuda "$models/model-f32.tinyloop" --backend cuda --dtypes f32,q8,q4
tl_bench d512-cuda --random "d_model=512,n_heads=8,d_ff=1408,vocab=4096,n_pre=2,n_loop=2,loops=7" --backend cuda --dtypes f32,q8,q4
tl_bench kjv-cpu2 "$models/model-f32.tinyloop" --backend cpu --threads 2 --dtypes f32,q8,q4
tl_batch() {  # NAME ARGS...: the batch engine's aggregate decode tok/s at batch 1, 8, 32
  local name=$1; shift
  local before; before=$(( $(wc -l < "$log") + 1 ))
  run_prog 75 "tinyloop bench $name" tinyloop bench "$@" --batch 1,8,32 --tokens 64 --repeat 2 --no-machine
  local r
  r=$(tail -n +"$before" "$log" | awk '$1 ~ /^[0-9]+$/ && NF == 9 { printf "batch %s %s tok/s (%s); ", $1, $2, $4 }')
  [ -n "$r" ] || r=$( [ $step_rc -eq 124 ] && echo TIMEOUT || echo "no rows (exit $step_rc): see log")
  rows+=("$(printf '| tinyloop bench | %-10s | %-68s | %4ss |' "$name" "$r" "$step_s")")
}
tl_batch kjv-batch "$models/model-f32.tinyloop" --backend cuda
tl_batch kjv-bcpu2 "$models/model-f32.tinyloop" --backend cpu --threads 2
# the engine's decode with the fast step (the executor reads TINYLOOP_CUDA_FAST): last, so a
# spent budget skips only this row
TINYLOOP_CUDA_FAST=1 tl_bench d512-fast --random "d_model=512,n_heads=8,d_ff=1408,vocab=4096,n_pre=2,n_loop=2,loops=7" --backend cuda --dtypes f32,q8,q4
# the bundled model with the fast step: the row to set beside kjv-cpu2 (the 5x target)
TINYLOOP_CUDA_FAST=1 tl_bench kjv-fast "$models/model-f32.tinyloop" --backend cuda --dtypes f32,q8,q4
# the persistent step (every part + persist: one cooperative kernel per step's fused launches)
TINYLOOP_CUDA_FAST=all,persist tl_bench d512-pers --random "d_model=512,n_heads=8,d_ff=1408,vocab=4096,n_pre=2,n_loop=2,loops=7" --backend cuda --dtypes f32,q8,q4
TINYLOOP_CUDA_FAST=all,persist tl_bench kjv-pers "$models/model-f32.tinyloop" --backend cuda --dtypes f32,q8,q4

say "table"
{
  echo "| kind           | case       | result                                                               | time |"
  echo "| --- | --- | --- | --- |"
  for r in "${rows[@]}"; do echo "$r"; done
  echo "device time: $(( $(date +%s) - t_start )) s of ${budget} s budget; test groups failed or timed out: $fails; device: $device"
} | tee -a "$log"
[ $fails -eq 0 ]
