#!/usr/bin/env bash
# gpu_check.sh: everything in this repository that only a GPU can show, in one command that
# finishes within ten minutes on one H200. The parts run side by side, each into a log of its
# own, each log beginning with the stamp of tools/stamp.py (the tree, and a hash of the
# backward checker's files), so a page quoting a log can be told from a stale one:
#
#   check_outputs  ./check_outputs.sh --require-gpu: the four scripts, their output the book's
#   pytest         the test suite, in parallel (pytest-xdist, -n 10), the checker's property tests
#                  with twice CI's examples a family (BACKWARD_CHECK_EXAMPLES, default 6 here); the
#                  log ends with the 15 slowest tests, to plan the part's ten minutes by
#   notebooks      both notebooks, executed top to bottom (tools/run_notebook.py)
#   in_the_wild    research/in_the_wild.py --sweep: real libraries' buggy and fixed releases, then
#                  each library's current Functions; releases side by side, autotuning pinned
#   checker_cli    python practice/backward_checker.py practice/solutions.py
#   vs_gradcheck   research/checker_vs_gradcheck.py: the checker beside gradcheck and opcheck
#   sanitizer      compute-sanitizer (memcheck) on each of the four scripts
#   suites         research/wild/suites.py --run: real libraries' own test files, whole, at a buggy
#                  and a fixed release, plain and under `pytest --backward-check` (its defaults);
#                  all ten releases side by side, so that the part ends within PART_TIMEOUT
#   suites_xdist   the same for Liger's cross-entropy file, its plain and plugin runs under -n 8
#   suites_compile the same for Liger's cross-entropy file, the plugin's run with its compile check
#   wild_compile   research/in_the_wild.py --sweep-only --compile: real Functions under torch.compile
#
# The last four run only when named (or with `all`): they need the releases that
# `research/wild/suites.py --download` and `research/in_the_wild.py --download` fetch where there
# is a network (SUITES, WHEELS).
#
# Usage: tools/gpu_check.sh [--out DIR] [--label NAME] [--list] [PART ... | all]
#   --out DIR     where the logs go (default benchmarks/results)
#   --label NAME  the logs' prefix (default: the GPU's name, as h200)
#   --list        print the parts and exit
#   PART          run only these parts (default: the first seven; all: every part)
# Environment: PYTHON (default python3), WHEELS (in_the_wild's wheels, default .wild-wheels),
# SUITES (suites.py's releases and their tests, default .wild-suites),
# NOTEBOOK_SITE (a folder holding nbclient, nbformat and ipykernel, put on PYTHONPATH for the
# notebooks and the test suite only, where the GPU's Python lacks them), STAMP_TREE (the tree to
# stamp, where this copy's git history cannot say), PART_TIMEOUT (seconds each part may take,
# default 540), BACKWARD_CHECK_EXAMPLES (the property tests' examples a family, default 6),
# PYTEST_WORKERS (the pytest part's -n, default 10).
# Exit codes: 0 every part passed; 1 a part failed or timed out (the summary log names it);
# 2 a usage error, or no CUDA GPU.
set -euo pipefail

cd "$(dirname "$0")/.."
DEFAULT_PARTS=(check_outputs pytest notebooks in_the_wild checker_cli vs_gradcheck sanitizer)
PARTS=("${DEFAULT_PARTS[@]}" suites suites_xdist suites_compile wild_compile)
PYTHON=${PYTHON:-python3}
WHEELS=${WHEELS:-.wild-wheels}
SUITES=${SUITES:-.wild-suites}
PART_TIMEOUT=${PART_TIMEOUT:-540}
NOTEBOOK_SITE=${NOTEBOOK_SITE:-}
with_notebook_site=""
[ -z "$NOTEBOOK_SITE" ] || with_notebook_site="PYTHONPATH=$NOTEBOOK_SITE${PYTHONPATH:+:$PYTHONPATH} "
SANITIZER=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
out=benchmarks/results
label=""
chosen=()

usage() {
  echo "usage: tools/gpu_check.sh [--out DIR] [--label NAME] [--list] [PART ... | all] (parts: ${PARTS[*]})" >&2
  exit 2
}

while [ $# -gt 0 ]; do
  case $1 in
    --out) [ $# -ge 2 ] || usage; out=$2; shift 2 ;;
    --label) [ $# -ge 2 ] || usage; label=$2; shift 2 ;;
    --list) printf '%s\n' "${PARTS[@]}"; exit 0 ;;
    -h|--help) sed -n '2,39p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu_check.sh: unknown option $1" >&2; usage ;;
    all) chosen+=("${PARTS[@]}"); shift ;;
    *)
      case " ${PARTS[*]} " in
        *" $1 "*) chosen+=("$1"); shift ;;
        *) echo "gpu_check.sh: no part named $1" >&2; usage ;;
      esac ;;
  esac
done
[ ${#chosen[@]} -gt 0 ] || chosen=("${DEFAULT_PARTS[@]}")

if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "gpu_check.sh: $PYTHON sees no CUDA GPU; these parts show only what a GPU shows" >&2
  exit 2
fi
if [ -z "$label" ]; then
  label=$("$PYTHON" -c 'import re, torch; print(re.sub(r"[^a-z0-9]+", "_", torch.cuda.get_device_name(0).lower().removeprefix("nvidia ")).strip("_"))')
fi
mkdir -p "$out"
stamp=$("$PYTHON" tools/stamp.py)
export PYTHONUNBUFFERED=1

# The command of each part, run from the repository root.
command_of() {
  case $1 in
    check_outputs) echo "PYTHON=$PYTHON ./check_outputs.sh --require-gpu" ;;
    pytest) echo "BACKWARD_CHECK_EXAMPLES=${BACKWARD_CHECK_EXAMPLES:-6} ${with_notebook_site}$PYTHON -m pytest -n ${PYTEST_WORKERS:-10} -q -ra --durations=15 -p no:cacheprovider" ;;
    notebooks) echo "${with_notebook_site}$PYTHON tools/run_notebook.py notebooks/chapter17.ipynb --output /tmp/gpu_check_chapter17.ipynb && ${with_notebook_site}$PYTHON tools/run_notebook.py notebooks/practice.ipynb --output /tmp/gpu_check_practice.ipynb" ;;
    in_the_wild) echo "$PYTHON research/in_the_wild.py --sweep --jobs 8 --pin-autotune --timeout $((PART_TIMEOUT - 20)) --wheels $WHEELS" ;;
    checker_cli) echo "$PYTHON practice/backward_checker.py practice/solutions.py" ;;
    vs_gradcheck) echo "$PYTHON research/checker_vs_gradcheck.py" ;;
    suites) echo "$PYTHON research/wild/suites.py --run $SUITES --jobs 10 --warm-workers 2 --timeout $((PART_TIMEOUT - 30)) --log $out/suites_$label.log" ;;
    suites_xdist) echo "$PYTHON research/wild/suites.py --run $SUITES --case liger-ce-none --jobs 2 --warm-workers 2 --workers 8 --timeout $((PART_TIMEOUT - 30)) --log $out/suites_${label}_xdist8.log" ;;
    suites_compile) echo "$PYTHON research/wild/suites.py --run $SUITES --case liger-ce-none --jobs 2 --warm-workers 2 --compile --timeout $((PART_TIMEOUT - 30)) --log $out/suites_${label}_compile.log" ;;
    wild_compile) echo "$PYTHON research/in_the_wild.py --sweep-only --compile --jobs 4 --pin-autotune --timeout $((PART_TIMEOUT - 20)) --wheels $WHEELS" ;;
    sanitizer) echo "for s in 01_chained_expression 02_graph_structure 03_fan_in 04_standalone_complete; do $SANITIZER --tool memcheck --error-exitcode 1 $PYTHON \$s.py > /dev/null || exit 1; echo \"\$s: memcheck clean\"; done" ;;
  esac
}

log_of() {
  case $1 in
    in_the_wild) echo "$out/in_the_wild_$label.log" ;;
    vs_gradcheck) echo "$out/checker_vs_gradcheck_$label.log" ;;
    suites|suites_xdist|suites_compile) echo "$out/${label}_$1_run.log" ;;
    wild_compile) echo "$out/in_the_wild_compile_$label.log" ;;
    *) echo "$out/${label}_$1.log" ;;
  esac
}

# One part: its stamp, its command, its output, its time and exit status, in its log.
run_part() {
  local part=$1 log command start status
  log=$(log_of "$part")
  command=$(command_of "$part")
  start=$(date +%s)
  {
    echo "$stamp"
    echo "part: $part"
    echo "command: $command"
    echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo
  } > "$log"
  set +e
  timeout --kill-after=10 "$PART_TIMEOUT" bash -c "$command" >> "$log" 2>&1
  status=$?
  set -e
  echo "----- $part: exit $status after $(( $(date +%s) - start )) s" >> "$log"
  return "$status"
}

summary="$out/${label}_gpu_check.log"
{
  echo "$stamp"
  echo "gpu_check.sh: ${chosen[*]}"
  "$PYTHON" -c 'import torch, triton; print(f"torch {torch.__version__}, triton {triton.__version__}, GPU: {torch.cuda.get_device_name(0)}")'
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
} > "$summary"
declare -A pids=()
for part in "${chosen[@]}"; do
  run_part "$part" &
  pids[$part]=$!
done
failed=()
for part in "${chosen[@]}"; do
  if wait "${pids[$part]}"; then
    echo "PASS $part ($(log_of "$part"))" | tee -a "$summary"
  else
    echo "FAIL $part ($(log_of "$part"): $(tail -n 1 "$(log_of "$part")"))" | tee -a "$summary"
    failed+=("$part")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "gpu_check.sh: ${#failed[@]} of ${#chosen[@]} parts failed: ${failed[*]}" | tee -a "$summary" >&2
  exit 1
fi
echo "gpu_check.sh: all ${#chosen[@]} parts passed" | tee -a "$summary"
