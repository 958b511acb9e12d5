#!/usr/bin/env bash
# Screenshots of the workbench under a virtual X server (Xvfb), at each screen size, into
# docs/screenshots/<WxH>/NAME.png: the main window after a real run on the bundled model, and
# every window of the Analysis menu after a real run of that view, and every step of the tour, at
# zoom 1 and in presentation mode. Each picture is one `shot` line below (a name and the
# workbench's arguments); the window size is the screen's, and a picture larger than the screen
# fails the run, as does any layout defect the workbench's audit prints. A `shot_model` line names
# its own model: the random Ouro- and Huginn-shaped checkpoints (Hugging Face folders, written by
# tools/make_hf_checkpoint.py when one of their shots is selected, opened as folders: the
# workbench imports them into a temporary cache).
# Usage:
#   bash packaging/screenshots.sh [BUILD_DIR] [MODEL]
#   TINYLOOP_SCREENSHOT_SIZES="1280x720" TINYLOOP_SCREENSHOT_ONLY="compare scrubber" bash packaging/screenshots.sh
# Needs: Xvfb, a built tinyloop-workbench; for the shaped models, a Python with numpy, safetensors
# and tokenizers ($TINYLOOP_PYTHON, else build/pyenv/bin/python, else python3).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-${TINYLOOP_BUILD_DIR:-$root/build}}
model=${2:-}
bin="$build/bin/tinyloop-workbench"
sizes=${TINYLOOP_SCREENSHOT_SIZES:-"1280x720 1920x1080"}
only=${TINYLOOP_SCREENSHOT_ONLY:-}
[ -x "$bin" ] || { echo "no $bin: build the tinyloop_workbench target first" >&2; exit 1; }
command -v Xvfb >/dev/null 2>&1 || { echo "no Xvfb: install xvfb" >&2; exit 1; }

work=$(mktemp -d)  # a saved session, between the shot that saves it and the one that opens it

# ---- the pictures: shot NAME ARGS... -----------------------------------------------------------
names=()
argv=()
models=()  # "" = MODEL (the bundled one by default); else a key of shaped_model below
shot() {
  names+=("$1")
  models+=("")
  shift
  local q
  printf -v q '%q ' "$@"
  argv+=("$q")
}
# shot_model KEY NAME ARGS...: the picture of a shaped model (the key: ouro-24x4, huginn-4x32)
shot_model() {
  local key=$1
  shift
  shot "$@"
  models[${#models[@]}-1]=$key
}
# The main window, one per plot tab, after a generation on the bundled model.
shot workbench-lens        --demo-run "In the beginning God created" --max-tokens 48 --tab lens --lens-metric emitted
shot workbench-kl          --demo-run "And God said, Let there be light" --max-tokens 48 --tab lens --lens-metric kl
shot workbench-depth       --demo-run "In the beginning" --preset "Early exit" --max-tokens 48 --tab depth
shot workbench-speculative --demo-run "In the beginning" --preset "Speculative" --max-tokens 64 --tab speculative
shot workbench-timing      --demo-run "In the beginning" --max-tokens 64 --tab timing
# A session saved after a run, then opened again without running (File -> Open session).
shot workbench-sampling    --demo-run "And God said" --preset "Sampling" --max-tokens 48 --save-session "$work/session.json"
shot workbench-session     --session "$work/session.json" --tab lens
# Every window of the Analysis menu, filled by a run of the view itself.
shot view-compare     --view compare     --prompt "In the beginning God created" --max-tokens 24
shot view-scrubber    --view scrubber    --prompt "And God said, Let there be light" --max-tokens 32
shot view-agreement   --view agreement   --prompt "In the beginning God created" --max-tokens 32
shot view-sweep       --view sweep       --max-tokens 16
shot view-step        --view step        --prompt "In the beginning" --max-tokens 12
shot view-calibration --view calibration --prompt "In the beginning" --max-tokens 32
shot view-compute     --view compute     --prompt "In the beginning" --max-tokens 24
shot view-kv          --view kv          --prompt "In the beginning" --max-tokens 24
shot view-quant       --view quant       --prompt "In the beginning" --max-tokens 24
shot tour-1-greedy-lens       --tour-step 1
shot tour-2-answer-emerges    --tour-step 2
shot tour-3-early-exit        --tour-step 3
shot tour-4-self-speculation  --tour-step 4
shot tour-5-depth-scrubber    --tour-step 5
# The tour as a class sees it on a projector: every step again in presentation mode.
shot presentation-tour-1-greedy-lens       --tour-step 1 --presentation
shot presentation-tour-2-answer-emerges    --tour-step 2 --presentation
shot presentation-tour-3-early-exit        --tour-step 3 --presentation
shot presentation-tour-4-self-speculation  --tour-step 4 --presentation
shot presentation-tour-5-depth-scrubber    --tour-step 5 --presentation
shot presentation-lens    --demo-run "In the beginning God created" --max-tokens 32 --tab lens --presentation
shot presentation-compare --view compare --prompt "In the beginning God created" --max-tokens 16 --presentation
shot dark-theme-lens      --demo-run "In the beginning God created" --max-tokens 32 --tab lens --theme dark
# Random checkpoints with the published models' depth structure at a small width (issue 36 item 7:
# readable at these shapes): Ouro-1.4B's 24 layers x 4 steps, with its learned exit gate (preset
# "Exit gate", written below); Huginn-0125's prelude 2, core 4 x 32 steps, coda 2 (no gate: its
# latent-difference exit, preset "Latent exit"). Their lens shows KL to the final pass: a random
# model's emitted-token probabilities are all near 1/vocab, a dark map. Ouro's depth shot shows,
# under the bars, the exit gate of token 2 (--gate-token), which stops at pass 3 of 4: λ per pass,
# the cumulative exit probability reaching q = 0.5 there.
shot_model ouro-24x4   ouro-lens         --demo-run "In the beginning God created" --max-tokens 32 --tab lens --lens-metric kl
shot_model ouro-24x4   ouro-depth-gate   --demo-run "In the beginning God created" --preset "Exit gate" --max-tokens 48 --tab depth --gate-token 2
shot_model ouro-24x4   ouro-kv           --view kv      --prompt "In the beginning" --max-tokens 24
shot_model ouro-24x4   ouro-compare      --view compare --prompt "In the beginning God created" --max-tokens 24
shot_model huginn-4x32 huginn-lens       --demo-run "In the beginning God created" --max-tokens 32 --tab lens --lens-metric kl
shot_model huginn-4x32 huginn-depth-exit --demo-run "In the beginning God created" --preset "Latent exit" --max-tokens 48 --tab depth
shot_model huginn-4x32 huginn-kv         --view kv      --prompt "In the beginning" --max-tokens 24
shot_model huginn-4x32 huginn-compare    --view compare --prompt "In the beginning God created" --max-tokens 24

# ---- taking them -------------------------------------------------------------------------------
# Fresh settings, so a developer's presets and recent files do not leak into the pictures.
export XDG_CONFIG_HOME
XDG_CONFIG_HOME=$(mktemp -d)
xpid=
cleanup() {
  [ -n "$xpid" ] && kill "$xpid" 2>/dev/null || true
  rm -rf "$XDG_CONFIG_HOME" "$work"
}
trap cleanup EXIT

# The early-exit presets of the shaped models' depth shots, in settings of their own (the other
# pictures' preset lists stay as a new user sees them). q = 0.5 for the gate: on the random gate
# it spreads the exits over passes 1 to 4 (the config's 1.0 would run every step).
shaped_config=$work/shaped-config
presets="$shaped_config/TinyLoop/tinyloop-workbench/presets"
mkdir -p "$presets"
cat >"$presets/exit-gate.json" <<'JSON'
{"format": "tinyloop-preset", "version": 1, "name": "Exit gate",
 "description": "Ouro's learned exit gate (gate_stop): a token stops at the first pass whose cumulative exit probability reaches 0.5.",
 "mode": "early-exit",
 "config": {"max_tokens": 48, "temperature": 0.0, "early_exit_criterion": "gate_stop", "early_exit_threshold": 0.5,
            "early_exit_min_L": 1, "early_exit_patience": 1, "early_exit_peek_every": 1}}
JSON
cat >"$presets/latent-exit.json" <<'JSON'
{"format": "tinyloop-preset", "version": 1, "name": "Latent exit",
 "description": "Huginn's latent difference (hidden_l2): a token stops once its state changes by less than 5% in a step.",
 "mode": "early-exit",
 "config": {"max_tokens": 48, "temperature": 0.0, "early_exit_criterion": "hidden_l2", "early_exit_threshold": 0.05,
            "early_exit_min_L": 2, "early_exit_patience": 1, "early_exit_peek_every": 1}}
JSON

# The shaped models, written once, when a shot of theirs is taken (a seeded writer: the same bytes
# every time). Huginn's --state-gain 0.7: the recurrence settles within the 32 steps at different
# depths per token, as a trained one does, instead of amplifying rounding (gain 1) or settling at
# once (0.3).
python=${TINYLOOP_PYTHON:-}
[ -n "$python" ] || { [ -x "$root/build/pyenv/bin/python" ] && python=$root/build/pyenv/bin/python; } || python=python3
export TINYLOOP_IMPORT_CACHE=$work/import-cache
shaped_model() {
  local dir=$work/$1
  if [ ! -d "$dir" ]; then
    case $1 in
      ouro-24x4)   "$python" "$root/tools/make_hf_checkpoint.py" ouro "$dir" --layers 24 --steps 4 >&2 ;;
      huginn-4x32) "$python" "$root/tools/make_hf_checkpoint.py" huginn "$dir" --core 4 --steps 32 --state-gain 0.7 >&2 ;;
      *) echo "no shaped model $1" >&2; return 1 ;;
    esac
  fi
  echo "$dir"
}

# Width and height of a PNG, from its header (bytes 16..23 of the IHDR chunk).
png_size() { od -An -tu1 -j16 -N8 "$1" | awk '{print $1*16777216+$2*65536+$3*256+$4, $5*16777216+$6*65536+$7*256+$8}'; }

failed=0
for size in $sizes; do
  out="$root/docs/screenshots/$size"
  mkdir -p "$out"
  # one X server per size, on a free display
  d=90
  while [ -e "/tmp/.X$d-lock" ] || [ -e "/tmp/.X11-unix/X$d" ]; do d=$((d + 1)); done
  Xvfb ":$d" -screen 0 "${size}x24" -nolisten tcp >/dev/null 2>&1 &
  xpid=$!
  for _ in $(seq 50); do [ -e "/tmp/.X11-unix/X$d" ] && break; sleep 0.1; done
  for i in "${!names[@]}"; do
    name=${names[$i]}
    if [ -n "$only" ] && [[ " $only " != *" $name "* ]] && [[ " $only " != *" ${name#*-} "* ]]; then continue; fi
    eval "args=(${argv[$i]})"
    echo "== $size $name"
    m=$model
    cfg=$XDG_CONFIG_HOME
    if [ -n "${models[$i]}" ]; then
      cfg=$shaped_config
      if ! m=$(shaped_model "${models[$i]}"); then
        echo "!! $size $name failed: its model could not be written" >&2
        failed=1
        continue
      fi
    fi
    if ! XDG_CONFIG_HOME=$cfg DISPLAY=":$d" QT_QPA_PLATFORM=xcb timeout 600 "$bin" ${m:+"$m"} --size "$size" "${args[@]}" \
         --screenshot "$out/$name.png"; then
      echo "!! $size $name failed" >&2
      failed=1
    fi
    # every picture fits the screen it was taken on
    if [ -f "$out/$name.png" ]; then
      read -r pw ph < <(png_size "$out/$name.png")
      if [ "$pw" -gt "${size%x*}" ] || [ "$ph" -gt "${size#*x}" ]; then
        echo "!! $size $name is ${pw}x${ph}: larger than the screen" >&2
        failed=1
      fi
    fi
  done
  kill "$xpid" 2>/dev/null || true
  wait "$xpid" 2>/dev/null || true
  xpid=
done
echo "screenshots in $root/docs/screenshots:"
for size in $sizes; do echo "$size: $(ls "$root/docs/screenshots/$size" | wc -l) files, $(du -sh "$root/docs/screenshots/$size" | cut -f1)"; done
exit $failed
