#!/usr/bin/env bash
# Where a decode token's time goes on the GPU: the carried bench_cuda (check_on_gpu.sh --pack)
# under Nsight Systems (per-kernel totals of the graph's nodes) and, for a few kernels, Nsight
# Compute's speed-of-light section. One log, $OUT/profile.log, everything under `timeout`.
#   kernels/cuda/profile_on_gpu.sh            # on the device (build-devcheck/bins.tar.xz carried)
#   TL_DEVICE_STUB=1 kernels/cuda/profile_on_gpu.sh   # here: the steps named, nothing run
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/profile-out}; mkdir -p "$out"; log=$out/profile.log; : > "$log"
stub=${TL_DEVICE_STUB:-0}
t0=$(date +%s)
say() { printf '== %s (t=%ss)\n' "$*" "$(( $(date +%s) - t0 ))" | tee -a "$log"; }
step() {  # CAP CMD...
  local cap=$1; shift
  printf -- '-- (timeout %ss) %s\n' "$cap" "$*" >> "$log"
  if [ "$stub" = 1 ]; then echo "(stub) $*" >> "$log"; return 0; fi
  timeout -k 5 "$cap" "$@" >> "$log" 2>&1; echo "-- exit $?" >> "$log"
}
dc=/tmp/devcheck/devcheck
say machine
step 10 nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem --format=csv
for t in nsys ncu; do echo "$t: $(command -v $t || ls /usr/local/cuda*/bin/$t /opt/nvidia/*/bin/$t 2>/dev/null | head -1)" >> "$log"; done
nsys=$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ "$stub" != 1 ]; then
  rm -rf /tmp/devcheck && mkdir -p /tmp/devcheck && tar -C /tmp/devcheck -xJf "$root/build-devcheck/bins.tar.xz"
  cat "$dc/COMMIT" >> "$log"
fi
runner=()
if [ "$stub" != 1 ] && ! "$dc/bin/tinyloop" --help > /dev/null 2>&1; then
  runner=("$(ls "$dc"/lib/ld-linux-x86-64.so.* | head -1)" --library-path "$dc/lib")
fi
B=(${runner[@]+"${runner[@]}"} "$dc/bin/bench_cuda")
if [ "$stub" != 1 ]; then  # the tests find the bundled models under the source path they were built with
  src_dir=$(sed -n 1p "$dc/PATHS")
  if [ -n "$src_dir" ] && [ ! -e "$src_dir/resources/models" ]; then
    mkdir -p "$(dirname "$src_dir")" && rm -rf "$src_dir" && ln -s "$root" "$src_dir"
  fi
fi
say "the fast step's bits: its op tests and the step against the reference"
step 60 ${runner[@]+"${runner[@]}"} "$dc/bin/test_cuda_ops" --gtest_filter='*CudaFastOps*:*Matmul*:*Attention*' --gtest_brief=1
step 90 ${runner[@]+"${runner[@]}"} "$dc/bin/test_cuda_forward" --gtest_filter='*CudaFastStep*' --gtest_brief=1
kjv=$root/resources/models/tinyloop-kjv
say models
for dt in f32 q4; do step 30 ${runner[@]+"${runner[@]}"} "$dc/bin/tinyloop" make-random /tmp/d512-$dt.tinyloop --dtype $dt; done
say "bench_cuda plain (baseline), the SM clock sampled every 50 ms meanwhile"
if [ "$stub" != 1 ]; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,utilization.gpu,power.draw,clocks_throttle_reasons.active --format=csv -lms 50 > /tmp/clocks.csv 2>&1 &
  smi=$!
fi
step 40 "${B[@]}" /tmp/d512-q4.tinyloop --prompt 512 --tokens 256 --reps 1
if [ "$stub" != 1 ]; then
  kill "$smi" 2> /dev/null; wait "$smi" 2> /dev/null
  echo "SM clock samples (MHz: count), during the bench above:" >> "$log"
  awk -F', ' 'NR > 1 { c[$2]++ } END { for (k in c) print "  " k ": " c[k] }' /tmp/clocks.csv | sort -k2 -nr | head -12 >> "$log"
  head -2 /tmp/clocks.csv >> "$log"; awk 'NR % 20 == 0' /tmp/clocks.csv | head -12 >> "$log"
fi
step 40 "${B[@]}" "$kjv/model-q4.tinyloop" --prompt 256 --tokens 256 --reps 1
step 40 "${B[@]}" /tmp/d512-f32.tinyloop --prompt 512 --tokens 256 --reps 1
step 40 "${B[@]}" "$kjv/model-f32.tinyloop" --prompt 256 --tokens 256 --reps 1
[ "${TL_PROFILE_SWEEP:-1}" = 1 ] && {
say "context sweep d512-q4 (attention's share: prompt 16 vs 512 vs 1536)"
step 40 "${B[@]}" /tmp/d512-q4.tinyloop --prompt 16 --tokens 256 --reps 1
step 40 "${B[@]}" /tmp/d512-q4.tinyloop --prompt 1024 --tokens 256 --reps 1
}
say "the fast step's parts (tinyloop bench, TINYLOOP_CUDA_FAST)"
for parts in ${TL_PROFILE_PARTS:-0 all}; do
  echo "parts $parts" >> "$log"
  TINYLOOP_CUDA_FAST=$parts step 40 ${runner[@]+"${runner[@]}"} "$dc/bin/tinyloop" bench --random d_model=512,n_heads=8,d_ff=1408,vocab=4096,n_pre=2,n_loop=2,loops=7 --backend cuda --dtypes q4 --modes plain --tokens 256 --prompt-tokens 256 --repeat 2 --no-machine
done
if [ -n "$nsys" ]; then
  say "nsys d512-q4"
  step 90 "$nsys" profile --cuda-graph-trace=node --stats=false -f true -o /tmp/p512 "${B[@]}" /tmp/d512-q4.tinyloop --prompt 512 --tokens 128 --reps 1
  step 40 "$nsys" stats -q --report cuda_gpu_kern_sum --format table /tmp/p512.nsys-rep
  say "nsys kjv-q4"
  step 60 "$nsys" profile --cuda-graph-trace=node --stats=false -f true -o /tmp/pkjv "${B[@]}" "$kjv/model-q4.tinyloop" --prompt 256 --tokens 128 --reps 1
  step 30 "$nsys" stats -q --report cuda_gpu_kern_sum --format table /tmp/pkjv.nsys-rep
fi
if [ -n "$ncu" ]; then
  if [ "${TL_PROFILE_SOL:-0}" = 1 ]; then
    say "ncu d512-q4: fast kernels, speed of light + launch stats (caches flushed, base clock)"
    step 60 "$ncu" --graph-profiling node -k 'regex:fast_|attention_split' --launch-skip 400 --launch-count 6 \
      --section SpeedOfLight --section LaunchStats --section Occupancy "${B[@]}" /tmp/d512-q4.tinyloop --prompt 512 --tokens 8 --reps 1
  fi
  if [ "${TL_PROFILE_STALLS:-0}" = 1 ]; then
    say "ncu d512-q4: where the fast kernels' warps wait (warm caches, the device's clocks)"
    step 60 "$ncu" --graph-profiling node -k 'regex:fast_|attention_split' --launch-skip 400 --launch-count 5 \
      --cache-control none --clock-control none --section WarpStateStats --section SchedulerStats --section SpeedOfLight \
      "${B[@]}" /tmp/d512-q4.tinyloop --prompt 512 --tokens 8 --reps 1
  fi
  say "ncu d512-q4: every fast kernel of two tokens, warm caches, the device's clocks (duration only)"
  [ "$stub" = 1 ] || timeout -k 5 90 "$ncu" --graph-profiling node -k 'regex:fast_|attention_split' --launch-skip 400 --launch-count 162 \
    --cache-control none --clock-control none --metrics gpu__time_duration.sum --csv --print-units base --print-kernel-base function \
    "${B[@]}" /tmp/d512-q4.tinyloop --prompt 512 --tokens 8 --reps 1 > /tmp/ncu.csv 2>&1
  grep -c gpu__time_duration /tmp/ncu.csv >> "$log"
  # per kernel: count, total us, mean us (the CSV's columns: ... "Kernel Name" ... "Metric Value")
  awk -F'","' '/gpu__time_duration.sum/ { n = $0; sub(/\(.*/, "", $5); v = $NF; gsub(/[",]/, "", v); k = $5 " " $9;
      c[k]++; t[k] += v } END { for (k in c) printf "  %-48s n %4d total %10.1f us mean %7.2f us\n", k, c[k], t[k] / 1000, t[k] / c[k] / 1000;
      }' /tmp/ncu.csv | sort -k5 -nr >> "$log"
  awk -F'","' '/gpu__time_duration.sum/ { v = $NF; gsub(/[",]/, "", v); s += v; n++ } END { printf "  all: %d kernels, %.1f us, per token (81 kernels at d512) %.1f us\n", n, s / 1000, s / 1000 / n * 81 }' /tmp/ncu.csv >> "$log"
  head -5 /tmp/ncu.csv >> "$log"
fi
say done
tail -c 12000 "$log" | grep -v '^$' | tail -150
