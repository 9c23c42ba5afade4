# Sourced by the experiment scripts: run OUT ARGS... starts `python -m fl.run ARGS --out OUT`, resumes OUT when it
# has started (config.json) and skips it when it has finished (summary.json), so a script run again after an
# interruption continues where it stopped. Uses $PYTHON (default: python); ACCEPT_CODE_CHANGE=1 resumes a run that
# other code started (fl.run --accept-code-change: the change is recorded in its provenance.json). A start passes
# --overwrite only for a folder fl.run is about to make or made (not there yet, or its .shufflefl-output mark, a
# plain file, says fl.run: a start cut short before config.json); a folder of a user's files is left to fl.run,
# which refuses it in one line.
run() {
  local out=$1; shift
  if [ -f "$out/summary.json" ]; then echo "$out: done"; return; fi
  if [ -f "$out/config.json" ]; then
    "${PYTHON:-python}" -m fl.run --resume "$out" --quiet ${ACCEPT_CODE_CHANGE:+--accept-code-change}
    return
  fi
  local mark="$out/.shufflefl-output" overwrite=
  if { [ ! -e "$out" ] && [ ! -L "$out" ]; } ||
     { [ -f "$mark" ] && [ ! -L "$mark" ] && [ "$(cat "$mark" 2>/dev/null)" = fl.run ]; }; then
    overwrite=--overwrite
  fi
  "${PYTHON:-python}" -m fl.run "$@" --out "$out" ${overwrite} --quiet
}
