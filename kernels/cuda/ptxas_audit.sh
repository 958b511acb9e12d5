#!/usr/bin/env bash
# The ptxas audit (CTest cuda_ptxas_audit): no register spill and no local memory in the hot
# kernels, the ones a decode step replays for every token (cuda_forward.cpp's captured graph):
# embedding, rmsnorm, matmul (every weight type, the accumulate and SwiGLU forms), matmul3
# (q/k/v), rope_store, attention, argmax, advance, and the fast step's (decode_fast.cu): the
# fused products (the combine-fed one too), q/k/v + RoPE + cache store, split attention and
# its combine, the persistent step that runs them as phases, and the batch engine's paged rows
# (every layer of every batched step). A spill or a stack frame there puts loads and stores to local memory (L1/L2
# traffic) into every layer of every token.
#
#   ptxas_audit.sh LOGDIR    (LOGDIR: the build's kernels/ptxas, written by ptxas_log.sh)
#
# Reads ptxas -v's report of the build's own compile for the real architecture (sm_90):
#   ptxas info    : Compiling entry function '_Z...' for 'sm_90'
#       N bytes stack frame, N bytes spill stores, N bytes spill loads
#   ptxas info    : Used N registers, ...
# Prints one line per hot kernel (registers, spills, stack); fails (exit 1) on any spill or
# stack in a hot kernel, or when a hot kernel is missing from the report (the audit would
# otherwise pass on nothing). The other kernels are printed for information.
set -u
logdir=${1:?usage: ptxas_audit.sh LOGDIR}
hot="embedding_kernel rmsnorm_kernel matmul_kernel matmul3_kernel rope_store_kernel rope_store_int8_kernel attention_kernel argmax_kernel advance_kernel
fast_matmul_kernel fast_combined_matmul_kernel fast_qkv_rope_store_kernel attention_split_kernel attention_combine_kernel
persistent_step_kernel paged_rows_kernel"
shopt -s nullglob
files=("$logdir"/*.ptxas)
if [ ${#files[@]} -eq 0 ]; then
  echo "no ptxas reports in $logdir: the CUDA kernels were not built with ptxas_log.sh (kernels/CMakeLists.txt)"
  exit 1
fi
# one line per compiled kernel: mangled name, arch, registers, stack, spill stores, spill loads
parse() {
  local fn="" arch="" st=0 ss=0 sl=0 line
  local re_fn="function '([^']+)' for '(sm_[0-9a-z]+)'"
  local re_st="([0-9]+) bytes stack frame, ([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads"
  local re_reg="Used ([0-9]+) registers"
  while IFS= read -r line; do
    if [[ $line =~ $re_fn ]]; then fn=${BASH_REMATCH[1]}; arch=${BASH_REMATCH[2]}; st=0; ss=0; sl=0
    elif [[ -n $fn && $line =~ $re_st ]]; then st=${BASH_REMATCH[1]}; ss=${BASH_REMATCH[2]}; sl=${BASH_REMATCH[3]}
    elif [[ -n $fn && $line =~ $re_reg ]]; then echo "$fn $arch ${BASH_REMATCH[1]} $st $ss $sl"; fn=""
    fi
  done
}
report=$(cat "${files[@]}" | parse)
if [ -z "$report" ]; then echo "the ptxas reports in $logdir hold no kernel"; exit 1; fi
fail=0
printf '%-4s %-28s %-6s %5s %12s %11s %6s  %s\n' "" kernel arch regs "spill-st/ld" stack "" "(mangled)"
for k in $hot; do
  rows=$(echo "$report" | grep -E "^[^ ]*[0-9]${k}[IPiEv]")
  if [ -z "$rows" ]; then echo "MISSING hot kernel $k: not in the ptxas report"; fail=1; continue; fi
  while read -r fn arch regs stack sst sld; do
    bad=""
    if [ "$sst" != 0 ] || [ "$sld" != 0 ] || [ "$stack" != 0 ]; then bad="FAIL"; fail=1; fi
    printf '%-4s %-28s %-6s %5s %5s/%-6s %6s B  %s\n' "${bad:-ok}" "$k" "$arch" "$regs" "$sst" "$sld" "$stack" "$fn"
  done <<< "$rows"
done
echo "-- not hot (information):"
echo "$report" | while read -r fn arch regs stack sst sld; do
  is_hot=0
  for k in $hot; do [[ $fn =~ [0-9]${k}[IPiEv] ]] && is_hot=1; done
  [ $is_hot = 0 ] && printf '     %-60s %-6s regs %3s spill %s/%s stack %s B\n' "$(echo "$fn" | c++filt 2>/dev/null | cut -c1-60)" "$arch" "$regs" "$sst" "$sld" "$stack"
done
if [ $fail = 0 ]; then echo "ptxas audit: no spill and no stack frame in the hot kernels"; else echo "ptxas audit FAILED"; fi
exit $fail
