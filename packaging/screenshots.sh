#!/usr/bin/env bash
# Screenshots of the workbench for the README, taken under a virtual X server (Xvfb): the app
# loads the bundled model (or the random demo model), generates from a prompt, waits for the
# run and its exact logit lens, grabs its own window (QWidget::grab) into docs/screenshots/ and
# quits. Usage:
#   bash packaging/screenshots.sh [BUILD_DIR] [MODEL]
# Needs: xvfb (xvfb-run), a built tinyloop-workbench.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-${TINYLOOP_BUILD_DIR:-$root/build}}
model=${2:-}
bin="$build/bin/tinyloop-workbench"
out="$root/docs/screenshots"
[ -x "$bin" ] || { echo "no $bin: build the tinyloop_workbench target first" >&2; exit 1; }
mkdir -p "$out"

run() {  # run NAME ARGS... : one screenshot
  local name=$1; shift
  echo "== $name"
  if command -v xvfb-run >/dev/null 2>&1; then
    xvfb-run -a -s "-screen 0 1600x1000x24" "$bin" ${model:+"$model"} "$@" --screenshot "$out/$name.png"
  else
    # no xvfb-run: a bare Xvfb on a free display
    local d=99
    while [ -e "/tmp/.X$d-lock" ]; do d=$((d + 1)); done
    Xvfb ":$d" -screen 0 1600x1000x24 >/dev/null 2>&1 &
    local xpid=$!
    sleep 1
    DISPLAY=":$d" "$bin" ${model:+"$model"} "$@" --screenshot "$out/$name.png" || { kill "$xpid"; return 1; }
    kill "$xpid"
  fi
}

# Fresh settings, so a developer's presets and recent files do not leak into the pictures.
export XDG_CONFIG_HOME
XDG_CONFIG_HOME=$(mktemp -d)
trap 'rm -rf "$XDG_CONFIG_HOME"' EXIT

run workbench-lens     --demo-run "In the beginning God created" --max-tokens 48 --tab lens --lens-metric emitted
run workbench-kl       --demo-run "And God said, Let there be light" --max-tokens 48 --tab lens --lens-metric kl
run workbench-depth    --demo-run "In the beginning" --preset "Early exit" --max-tokens 48 --tab depth
run workbench-timing   --demo-run "In the beginning" --max-tokens 64 --tab timing
run workbench-speculative --demo-run "In the beginning" --preset "Speculative" --max-tokens 64 --tab speculative
# Views menu (issue 8): each view saves its own window after a real run on the model.
run compare  --view compare  --prompt "In the beginning God created" --max-tokens 24
run scrubber --view scrubber --prompt "And God said, Let there be light" --max-tokens 32
echo "screenshots in $out:"
ls -l "$out"
