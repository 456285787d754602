#!/usr/bin/env bash
# check_outputs.sh: verify that this machine's Python, PyTorch and Triton reproduce
# the output that Chapter 17 documents.
#
# It runs the numbered scripts (all at once, reported in order), masks memory
# addresses (every 0x<hex>) in their stdout and in expected_output/<script>.txt,
# and compares the two. The scripts run on a CUDA GPU when PyTorch sees one, and
# through the Triton interpreter on the CPU otherwise.
#
# Usage: ./check_outputs.sh [--require-gpu] [--update] [SCRIPT ...]
#   SCRIPT          check only these: 02_graph_structure.py, 02_graph_structure or 02;
#                   default: every NN_*.py script beside this file
#   --require-gpu   exit 2 unless the scripts would run on a CUDA GPU
#   --update        rewrite expected_output/ from this run and show what changed;
#                   refused when any script exits non-zero
#   -h, --help      show this help
# Environment:
#   PYTHON          the interpreter to verify (default: python3)
# Exit codes:
#   0  every script passed
#   1  a script failed: its output differs, or it exited non-zero
#   2  usage or environment error (unknown flag, no torch or triton, no GPU
#      with --require-gpu)
set -euo pipefail

readonly ADDRESS_MASK='0x<address>'
readonly STDERR_TAIL_LINES=25

PYTHON=${PYTHON:-python3}
require_gpu=0
update=0
scripts=()
workdir=""
python_version=""
torch_version=""
triton_version=""

usage() {
  sed -n '/^# Usage:/,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
}

err() {
  printf 'check_outputs.sh: %s\n' "$*" >&2
}

usage_error() {
  err "$1"
  usage >&2
  exit 2
}

# Accepts "02_graph_structure.py", "02_graph_structure", "./02_graph_structure.py" or "02".
resolve_script() {
  local name=${1#./}
  if [[ "$name" =~ ^[0-9][0-9]$ ]]; then
    name=$(printf '%s\n' "$name"_*.py | head -n 1)
  fi
  name=${name%.py}.py
  if [[ ! "$name" =~ ^[0-9][0-9]_[A-Za-z0-9_]+\.py$ ]] || [ ! -f "$name" ]; then
    usage_error "no such script: $1 (known: $(printf '%s ' [0-9][0-9]_*.py))"
  fi
  printf '%s\n' "$name"
}

parse_args() {
  local arg only_scripts=0
  for arg in "$@"; do
    if [ "$only_scripts" -eq 0 ]; then
      case "$arg" in
        --require-gpu) require_gpu=1; continue ;;
        --update) update=1; continue ;;
        -h | --help) usage; exit 0 ;;
        --) only_scripts=1; continue ;;
        -*) usage_error "unknown option: $arg" ;;
      esac
    fi
    # resolve_script exits 2 from its subshell; set -e carries that out here.
    scripts+=("$(resolve_script "$arg")")
  done
  if [ ${#scripts[@]} -eq 0 ]; then
    local script
    for script in [0-9][0-9]_*.py; do
      if [ -f "$script" ]; then scripts+=("$script"); fi
    done
  fi
  [ ${#scripts[@]} -gt 0 ] || usage_error "no NN_*.py scripts found in $(pwd)"
}

# Exits 2, saying what to install, unless $PYTHON runs and has torch, triton and
# numpy; sets python_version, torch_version and triton_version. It only looks the
# packages up: importing torch costs a second or more, and the scripts, which
# import it anyway, report on stderr which backend they chose.
check_packages() {
  if ! command -v "$PYTHON" >/dev/null 2>&1; then
    err "cannot run PYTHON=$PYTHON: no such interpreter. Set PYTHON=/path/to/python, or run 'make check' to use .venv."
    exit 2
  fi
  local report status=0
  report=$("$PYTHON" -c '
import importlib.metadata
import importlib.util
import sys

missing = [m for m in ("torch", "triton", "numpy") if importlib.util.find_spec(m) is None]
if missing:
    print(" ".join(missing))
    sys.exit(3)


def version(package):
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "(version unknown)"


print(sys.version.split()[0])
print(version("torch"))
print(version("triton"))
' 2>&1) || status=$?
  if [ "$status" -eq 3 ]; then
    err "$PYTHON cannot import: $report"
    err "install the pinned versions with 'make check' (creates .venv), or: $PYTHON -m pip install -r requirements.txt"
    exit 2
  elif [ "$status" -ne 0 ]; then
    err "$PYTHON failed to start (exit status $status)${report:+: $report}"
    exit 2
  fi
  python_version=$(printf '%s\n' "$report" | sed -n 1p)
  torch_version=$(printf '%s\n' "$report" | sed -n 2p)
  triton_version=$(printf '%s\n' "$report" | sed -n 3p)
}

# For --require-gpu: exits 2 unless the scripts would choose CUDA, as they do
# when TRITON_INTERPRET is not 1 and torch sees a GPU.
require_cuda() {
  local reason status=0
  reason=$("$PYTHON" -c '
import os
import torch
if os.environ.get("TRITON_INTERPRET") == "1":
    raise SystemExit("TRITON_INTERPRET=1 is set, so the scripts would run in the Triton interpreter")
if not torch.cuda.is_available():
    raise SystemExit(f"torch {torch.__version__} sees no CUDA GPU, so the scripts would run in the Triton interpreter")
' 2>&1) || status=$?
  if [ "$status" -ne 0 ]; then
    err "--require-gpu: $(printf '%s\n' "$reason" | tail -n 1)"
    exit 2
  fi
}

print_header() {
  printf 'Checking Chapter 17 output\n'
  printf '  python   %s (%s)\n' "$python_version" "$(command -v "$PYTHON")"
  printf '  torch    %s\n' "$torch_version"
  printf '  triton   %s\n' "$triton_version"
}

mask_addresses() {
  sed -E "s/0x[0-9a-fA-F]+/$ADDRESS_MASK/g" "$1"
}

# Runs one script, leaving its stdout, stderr, exit status and seconds in $workdir.
run_script() {
  local script=$1 out=$workdir/${1%.py}
  local TIMEFORMAT=%R status=0
  { time "$PYTHON" "$script" >"$out.stdout" 2>"$out.stderr" || status=$?; } 2>"$out.seconds"
  printf '%s\n' "$status" >"$out.status"
}

run_scripts_concurrently() {
  local script
  for script in "${scripts[@]}"; do
    run_script "$script" &
  done
  wait
}

# The line each script prints on stderr naming where its kernels ran, e.g.
# "running on NVIDIA H200 (CUDA)".
backend_of() {
  grep -m 1 -e '^running on .* (CUDA)$' -e 'through the Triton interpreter$' "$workdir/${1%.py}.stderr" ||
    printf 'unknown (the script printed no backend line)\n'
}

# Prints PASS or FAIL for one script, with the diff and its stderr's tail on
# failure. Returns 0 for PASS, 1 when its output is wrong, 2 when it exited non-zero.
report_script() {
  local script=$1 name=${1%.py}
  local out=$workdir/$name expected=expected_output/$name.txt
  local status seconds verdict=0
  status=$(cat "$out.status")
  seconds=$(cat "$out.seconds")
  mask_addresses "$out.stdout" >"$out.masked"
  if [ ! -f "$expected" ]; then
    printf 'FAIL  %-28s %6s s   no %s\n' "$script" "$seconds" "$expected"
    verdict=1
  elif ! mask_addresses "$expected" | diff -u --label "$expected" --label "$script (stdout)" - "$out.masked" >"$out.diff"; then
    printf 'FAIL  %-28s %6s s   stdout differs from %s\n' "$script" "$seconds" "$expected"
    sed 's/^/      /' "$out.diff"
    verdict=1
  fi
  if [ "$require_gpu" -eq 1 ] && ! backend_of "$script" | grep -q '(CUDA)$'; then
    [ "$verdict" -eq 1 ] || printf 'FAIL  %-28s %6s s\n' "$script" "$seconds"
    printf '      did not run on the GPU: %s\n' "$(backend_of "$script")"
    verdict=1
  fi
  if [ "$status" -ne 0 ]; then
    [ "$verdict" -eq 1 ] || printf 'FAIL  %-28s %6s s\n' "$script" "$seconds"
    printf '      exited with status %s; the end of its stderr:\n' "$status"
    tail -n "$STDERR_TAIL_LINES" "$out.stderr" | sed 's/^/      | /'
    return 2
  fi
  if [ "$verdict" -eq 0 ]; then
    printf 'PASS  %-28s %6s s\n' "$script" "$seconds"
  fi
  return "$verdict"
}

# Rewrites the expected file of every script whose masked output changed.
update_expected() {
  local script name
  mkdir -p expected_output
  for script in "${scripts[@]}"; do
    name=${script%.py}
    if [ ! -f "expected_output/$name.txt" ] || ! mask_addresses "expected_output/$name.txt" | cmp -s - "$workdir/$name.masked"; then
      cp "$workdir/$name.stdout" "expected_output/$name.txt"
      printf 'updated expected_output/%s.txt\n' "$name"
    fi
  done
}

main() {
  cd "$(dirname "$0")"
  parse_args "$@"
  check_packages
  if [ "$require_gpu" -eq 1 ]; then require_cuda; fi
  print_header

  workdir=$(mktemp -d "${TMPDIR:-/tmp}/check_outputs.XXXXXX")
  trap 'rm -rf "$workdir"' EXIT
  local TIMEFORMAT=%R
  { time run_scripts_concurrently; } 2>"$workdir/wall.seconds"

  local script backends
  backends=$(for script in "${scripts[@]}"; do backend_of "$script"; done | sort -u)
  printf '%s\n' "$backends" | sed -e '1s/^/  backend  /' -e '2,$s/^/           /'
  printf '\n'

  local passed=0 failed=0 crashed=0 result
  for script in "${scripts[@]}"; do
    result=0
    report_script "$script" || result=$?
    case "$result" in
      0) passed=$((passed + 1)) ;;
      2) failed=$((failed + 1)); crashed=$((crashed + 1)) ;;
      *) failed=$((failed + 1)) ;;
    esac
  done
  printf '\n%d script(s) run concurrently in %s s of wall time\n' "${#scripts[@]}" "$(cat "$workdir/wall.seconds")"

  if [ "$update" -eq 1 ] && [ "$failed" -gt 0 ]; then
    if [ "$crashed" -gt 0 ]; then
      err "--update refused: $crashed script(s) exited non-zero; expected_output/ is unchanged."
      printf '%d passed, %d failed\n' "$passed" "$failed"
      exit 1
    fi
    update_expected
    passed=$((passed + failed))
    failed=0
  fi

  if ! printf '%s\n' "$backends" | grep -q '(CUDA)$'; then
    printf 'note: no GPU was verified; the scripts did not run on CUDA. Use --require-gpu to insist on a GPU.\n'
  fi
  if [ "$failed" -gt 0 ]; then
    err "see a script's whole output with: $PYTHON <script>. If its new output is right, record it with: ./check_outputs.sh --update <script>"
  fi
  printf '%d passed, %d failed\n' "$passed" "$failed"
  [ "$failed" -eq 0 ]
}

main "$@"
