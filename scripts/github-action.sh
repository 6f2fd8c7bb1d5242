#!/usr/bin/env bash
# The steps of the GitHub Action in action.yml (tests/probe.rs runs them with the same commands).
#   install: a driftline on PATH — $DRIFTLINE_BIN when set, else built from the action's own checkout.
#   check:   capture the server's list (INPUT_COMMAND over stdio, or INPUT_URL), diff it against
#            INPUT_BASELINE: annotations on stdout, SARIF to a file, Markdown to the step summary; outputs
#            `exit-code` (diff's, per INPUT_FAIL_ON) and `sarif`. Drift never fails this step (the SARIF is
#            uploaded first); a capture or usage error does.
set -euo pipefail

action_path=${GITHUB_ACTION_PATH:-$(cd "$(dirname "$0")/.." && pwd)}
work=${RUNNER_TEMP:-${TMPDIR:-/tmp}}

install() {
  if [ -n "${DRIFTLINE_BIN:-}" ]; then
    mkdir -p "$work/driftline-bin"
    ln -sf "$DRIFTLINE_BIN" "$work/driftline-bin/driftline"
    bin_dir="$work/driftline-bin"
  else
    cargo install --locked --root "$work/driftline" --path "$action_path"
    bin_dir="$work/driftline/bin"
  fi
  echo "$bin_dir" >> "${GITHUB_PATH:-/dev/null}"
  "$bin_dir/driftline" --version
}

check() {
  : "${INPUT_BASELINE:?the baseline input (the committed tool list) is required}"
  local current="$work/mcp-current.json" sarif="$work/mcp-drift.sarif"
  if [ -n "${INPUT_URL:-}" ]; then
    driftline capture --url "$INPUT_URL" --timeout "${INPUT_TIMEOUT:-60}" --out "$current"
  elif [ -n "${INPUT_COMMAND:-}" ]; then
    # The command is split on spaces, as a shell would (no quoting inside it).
    read -r -a command <<< "$INPUT_COMMAND"
    driftline capture --timeout "${INPUT_TIMEOUT:-60}" --out "$current" -- "${command[@]}"
  else
    echo "::error title=driftline::give the command (stdio) or url input" >&2
    return 2
  fi
  local options=(--context-growth-percent "${INPUT_CONTEXT_GROWTH_PERCENT:-0}")
  if [ -n "${INPUT_IGNORE:-}" ]; then options+=(--ignore "$INPUT_IGNORE"); fi
  if [ -n "${INPUT_SERVER:-}" ]; then options+=(--server "$INPUT_SERVER"); fi
  driftline diff "$INPUT_BASELINE" "$current" "${options[@]}" --format github
  driftline diff "$INPUT_BASELINE" "$current" "${options[@]}" --format sarif > "$sarif"
  driftline diff "$INPUT_BASELINE" "$current" "${options[@]}" --format markdown >> "${GITHUB_STEP_SUMMARY:-/dev/null}"
  local code=0
  driftline diff "$INPUT_BASELINE" "$current" "${options[@]}" --fail-on "${INPUT_FAIL_ON:-breaking}" > /dev/null || code=$?
  if [ "$code" -gt 1 ]; then return "$code"; fi
  { echo "exit-code=$code"; echo "sarif=$sarif"; echo "current=$current"; } >> "${GITHUB_OUTPUT:-/dev/null}"
}

case "${1:-}" in
  install) install ;;
  check) check ;;
  *) echo "usage: $0 install|check" >&2; exit 2 ;;
esac
