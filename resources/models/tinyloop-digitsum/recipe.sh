#!/usr/bin/env bash
# tinyloop-digitsum recipe v1: one command from Debian packages + PyPI to a shipped, evaluated reasoner.
#
#   resources/models/tinyloop-digitsum/recipe.sh [--minutes N] [--resume]
#
# --minutes N   wall-clock training budget (default 38; the whole recipe then takes ~50 min on a
#               2-core machine: held-out set 1 s, engine build minutes if not built, eval ~2 min)
# --resume      continue training from work/ckpt.pt (model, optimizer, data RNG, curriculum,
#               elapsed time) up to the total budget given
# TRAIN_ARGS="--steps N" gives a step-exact rerun (N from the model card); THREADS (default 2).
# Torch runs on the CPU; on a machine with CUDA the same recipe runs unchanged (torch's CPU path).
# Scratch goes to work/ (git-ignored); the outputs are heldout.jsonl, model-f32.tinyloop,
# parity.json, model-q8.tinyloop, model-q4.tinyloop, work/eval.{json,md}, work/eval-q{8,4}.{json,md}.
set -euo pipefail
cd "$(dirname "$0")"
MINUTES="${MINUTES:-38}"
RESUME=()
while (( $# )); do
  case "$1" in
    --minutes) MINUTES="$2"; shift 2 ;;
    --resume) RESUME=(--resume); shift ;;
    *) echo "recipe.sh: unknown argument '$1' (allowed: --minutes N, --resume)" >&2; exit 2 ;;
  esac
done
PY="${PYTHON:-python3}"
ROOT="$(cd ../../.. && pwd)"
BUILD="${BUILD_DIR:-$ROOT/build}"

echo "== 0. dependencies"
"$PY" -c "import torch" 2>/dev/null || "$PY" -m pip install torch --index-url https://download.pytorch.org/whl/cpu \
  || "$PY" -m pip install torch
mkdir -p work

echo "== 1. held-out problems (seed 20261201, never trained on)"
"$PY" task.py heldout.jsonl

echo "== 2. training ($MINUTES min)"
nice -n 10 "$PY" train.py --minutes "$MINUTES" --threads "${THREADS:-2}" "${RESUME[@]}" ${TRAIN_ARGS:-} \
  2>&1 | tee -a work/train.log

echo "== 3. export";  "$PY" export_model.py --eval ""    # model-f32.tinyloop + bit-exact self-check

echo "== 4. the engine (tinyloop CLI + tinyloop_py binding) to evaluate through"
if [[ ! -x "$BUILD/bin/tinyloop" || -z "$(ls "$BUILD"/python/tinyloop_py*.so 2>/dev/null)" ]]; then
  [[ -f "$BUILD/CMakeCache.txt" ]] || cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DTINYLOOP_BUILD_UI=OFF
  cmake --build "$BUILD" --target tinyloop_cli tinyloop_py -j"$(nproc)"
fi

echo "== 5. evaluation through the engine (one thread)"
/usr/bin/python3 evaluate.py --cli "$BUILD/bin/tinyloop"   # work/eval.json, work/eval.md
echo "== 6. export again: the tables and the recommended early exit go into the metadata"
"$PY" export_model.py

echo "== 7. parity fixture"; "$PY" make_parity.py   # parity.json: float64 reference logits from the exported file

echo "== 8. quantization (the engine's tinyloop quantize, group size 32) and the same evaluation of each file"
for q in q8 q4; do
  "$BUILD/bin/tinyloop" quantize model-f32.tinyloop "model-$q.tinyloop" --dtype "$q" --group-size 32
  /usr/bin/python3 evaluate.py --model "model-$q.tinyloop" --cli "$BUILD/bin/tinyloop" --out "work/eval-$q"
done
ls -la model-*.tinyloop parity.json heldout.jsonl
