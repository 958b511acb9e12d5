#!/usr/bin/env bash
# tinyloop-kjv recipe v3: one command from Debian packages to a shipped, evaluated model.
#
#   resources/models/tinyloop-kjv/recipe.sh [--minutes N]
#
# Default training budget: 80 minutes of wall clock, so the whole recipe fits in about 2 hours
# on a 2-core machine (corpus 1 s, tokenizer 10 s, evaluation ~5-10 min).  Set MINUTES or pass
# --minutes.  For a step-exact rerun pass TRAIN_ARGS="--steps N" (N from the model card).
# Scratch goes to work/ (git-ignored); the outputs are model-f32.tinyloop, parity.json,
# work/eval.{json,md}.
set -euo pipefail
cd "$(dirname "$0")"
MINUTES="${MINUTES:-80}"
if [[ "${1:-}" == "--minutes" ]]; then MINUTES="$2"; fi
PY="${PYTHON:-python3}"

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
"$PY" -c "import torch" 2>/dev/null || "$PY" -m pip install torch --index-url https://download.pytorch.org/whl/cpu
mkdir -p work

echo "== 1. corpus";     "$PY" build_corpus.py
echo "== 2. tokenizer";  "$PY" train_tokenizer.py --vocab-size 2048
echo "== 3. training ($MINUTES min)"
"$PY" train.py --minutes "$MINUTES" ${TRAIN_ARGS:-} 2>&1 | tee work/train.log
echo "== 4. export";     "$PY" export.py              # writes model-f32.tinyloop + self-check
echo "== 5. evaluation"; "$PY" evaluate.py            # work/eval.json, work/eval.md
"$PY" export.py                                        # again: puts the per-depth tables into metadata
echo "== 6. parity fixture"; "$PY" make_parity.py     # parity.json (from the exported file)

echo "== 7. quantization (C++ tool, optional)"
# Quantization is done by the C++ `tinyloop quantize` tool (built by packaging/setup.sh into
# build/bin); run it only when the binary exists.
TL="${TINYLOOP_BIN:-$(command -v tinyloop || true)}"
[[ -z "$TL" && -x ../../../build/bin/tinyloop ]] && TL=../../../build/bin/tinyloop
if [[ -n "$TL" && -x "$TL" ]]; then
  "$TL" quantize model-f32.tinyloop model-q8.tinyloop --dtype q8 --group-size 32
  "$TL" quantize model-f32.tinyloop model-q4.tinyloop --dtype q4 --group-size 32
else
  echo "tinyloop binary not found: skipping quantization (model-q8/q4.tinyloop not produced)"
fi
ls -la model-*.tinyloop parity.json
