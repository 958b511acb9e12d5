#!/usr/bin/env bash
# tinyloop-kjv recipe v4: one command from Debian packages to a shipped, evaluated model.
#
#   resources/models/tinyloop-kjv/recipe.sh [--minutes N] [--resume]
#
# Default training budget: 150 minutes of wall clock on both cores (the whole recipe takes about
# 3 hours on a 2-core machine: corpus 1 s, tokenizer 10 s, evaluation ~10 min, the engine's
# recommendation search ~10 min per file). The shape is v4's (see README.md, "Architecture" and
# ABLATIONS-v4.md): no prelude, two shared layers, trained at depths 2..8 (its periodic evaluations
# log depths 1, 2 and 8). The shipped default depth is 4 (SHIP_LOOPS): chosen after training by
# `python3 measure.py --candidates 8,6,4` (the card's "Choosing the default depth"): the best
# per-depth loss and the only candidate whose loss does not rise up to its default.
# TRAIN_ARGS adds train.py flags (e.g. "--steps N" for a step-exact rerun of the card's run).
#
# --resume continues an interrupted training from work/ckpt.pt (written every 5 minutes: model,
# optimizer, batch RNG, curriculum, step, elapsed time) to the same budget, then runs the rest.
# Scratch goes to work/ (git-ignored); the outputs are model-{f32,q8,q4}.tinyloop, parity.json,
# work/eval.{json,md}.
set -euo pipefail
cd "$(dirname "$0")"
MINUTES="${MINUTES:-150}"
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
SHAPE=(--n-pre-blocks 0 --n-loop-layers 2 --min-train-loops 2 --max-train-loops 8 --default-loops 8)
EXPORT=(--default-loops "${SHIP_LOOPS:-4}" --recipe "tinyloop-kjv recipe v4")

echo "== 0. dependencies"
need=()
command -v bible >/dev/null || need+=(bible-kjv)
[[ -f /usr/lib/bible.data ]] || need+=(bible-kjv-text)
[[ -f /usr/share/dictd/devil.dict.dz ]] || need+=(dict-devil)
[[ -f /usr/share/dictd/jargon.dict.dz ]] || need+=(dict-jargon)
if (( ${#need[@]} )); then
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update && $SUDO apt-get install -y "${need[@]}"
fi
"$PY" -c "import torch" 2>/dev/null || "$PY" -m pip install torch --index-url https://download.pytorch.org/whl/cpu \
  || "$PY" -m pip install torch
mkdir -p work

if (( ${#RESUME[@]} )); then
  [[ -f work/ckpt.pt ]] || { echo "recipe.sh: --resume: no work/ckpt.pt to resume from" >&2; exit 2; }
  echo "== 1-2. corpus and tokenizer: kept from the interrupted run"
  echo "== 3. training, resumed (to the budget of the interrupted run's command line: $MINUTES min)"
  nice -n 10 "$PY" train.py --minutes "$MINUTES" --threads "${THREADS:-2}" --resume ${TRAIN_ARGS:-} 2>&1 | tee -a work/train.log
else
  echo "== 1. corpus";     "$PY" build_corpus.py
  echo "== 2. tokenizer";  "$PY" train_tokenizer.py --vocab-size 2048
  echo "== 3. training ($MINUTES min)"
  nice -n 10 "$PY" train.py --minutes "$MINUTES" --threads "${THREADS:-2}" "${SHAPE[@]}" ${TRAIN_ARGS:-} 2>&1 | tee work/train.log
fi
echo "== 4. export";     "$PY" export.py "${EXPORT[@]}"   # writes model-f32.tinyloop + self-check
echo "== 5. evaluation"; "$PY" evaluate.py                # work/eval.json, work/eval.md
"$PY" export.py "${EXPORT[@]}"                             # again: puts the per-depth tables into metadata

echo "== 6. the engine (tinyloop CLI), for the recommendation search and quantization"
TL="${TINYLOOP_BIN:-}"
[[ -z "$TL" && -x "$BUILD/bin/tinyloop" ]] && TL="$BUILD/bin/tinyloop"
if [[ -z "$TL" ]]; then
  [[ -f "$BUILD/CMakeCache.txt" ]] || cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DTINYLOOP_BUILD_UI=OFF
  cmake --build "$BUILD" --target tinyloop_cli -j"$(nproc)"
  TL="$BUILD/bin/tinyloop"
fi

echo "== 7. recommended settings (early exit, speculation) measured on this file, into its metadata"
head -c 1700 val-sample.txt > work/tune.txt
"$TL" recommend model-f32.tinyloop --file work/tune.txt --threads 1 --write | tee work/recommend-f32.txt

echo "== 8. parity fixture"; "$PY" make_parity.py     # parity.json (from the exported file, its sha256 too)

echo "== 9. quantization (group size 32), each file's own recommendation"
for q in q8 q4; do
  "$TL" quantize model-f32.tinyloop "model-$q.tinyloop" --dtype "$q" --group-size 32
  "$TL" recommend "model-$q.tinyloop" --file work/tune.txt --threads 1 --write | tee "work/recommend-$q.txt"
done
ls -la model-*.tinyloop parity.json
