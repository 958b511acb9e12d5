#!/usr/bin/env bash
# Compiler launcher for the CUDA kernels (kernels/CMakeLists.txt): runs the compile it is given
# (ccache then nvcc, with -Xptxas=-v) and keeps ptxas's resource report of the object in
# LOGDIR/<object>.ptxas, so the ptxas audit (ptxas_audit.sh, CTest cuda_ptxas_audit) reads the
# build's own compile instead of compiling again. ccache replays the report on a hit. The
# report's lines are left out of the build's output (one block per kernel would drown it).
#   ptxas_log.sh LOGDIR COMMAND...
set -u
logdir=$1; shift
obj=""
prev=""
for a in "$@"; do
  [ "$prev" = "-o" ] && obj=$a
  prev=$a
done
mkdir -p "$logdir"
err=$(mktemp)
"$@" 2> "$err"
rc=$?
if [ -n "$obj" ] && [ $rc -eq 0 ]; then
  grep -E "ptxas info|bytes stack frame" "$err" > "$logdir/$(basename "$obj").ptxas"
fi
grep -vE "ptxas info|bytes stack frame" "$err" >&2
rm -f "$err"
exit $rc
