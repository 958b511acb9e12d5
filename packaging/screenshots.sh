#!/usr/bin/env bash
# Screenshots of the workbench under a virtual X server (Xvfb), at each screen size, into
# docs/screenshots/<WxH>/NAME.png: the main window after a real run on the bundled model, and
# every window of the Analysis menu after a real run of that view, and every step of the tour, at
# zoom 1 and in presentation mode. Each picture is one `shot` line below (a name and the
# workbench's arguments); the window size is the screen's, and a picture larger than the screen
# fails the run, as does any layout defect the workbench's audit prints.
# Usage:
#   bash packaging/screenshots.sh [BUILD_DIR] [MODEL]
#   TINYLOOP_SCREENSHOT_SIZES="1280x720" TINYLOOP_SCREENSHOT_ONLY="compare scrubber" bash packaging/screenshots.sh
# Needs: Xvfb, a built tinyloop-workbench.
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
shot() {
  names+=("$1")
  shift
  local q
  printf -v q '%q ' "$@"
  argv+=("$q")
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
    if ! DISPLAY=":$d" QT_QPA_PLATFORM=xcb timeout 600 "$bin" ${model:+"$model"} --size "$size" "${args[@]}" \
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
