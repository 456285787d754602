#!/usr/bin/env bash
# check_outputs.sh: verify that this machine's Python, PyTorch and Triton reproduce
# the output that Chapter 17 documents.
#
# It runs the numbered scripts all at once and reports each as soon as it and every
# script before it have finished, in script order. It masks memory addresses (every
# 0x<hex>) in their stdout and in expected_output/<script>.txt, and compares the two.
# The scripts run on the GPU when PyTorch sees one (CUDA or ROCm), and through the
# Triton interpreter on the CPU otherwise. A script that runs past its timeout is
# stopped, with everything it started, and fails; Ctrl-C stops every script.
#
# Usage: ./check_outputs.sh [--require-gpu] [--update] [--timeout SECONDS] [SCRIPT ...]
#   SCRIPT             check only these: 02_graph_structure.py, 02_graph_structure or 02;
#                      default: every NN_*.py script beside this file
#   --require-gpu      exit 2 unless the scripts would run on a GPU (CUDA or ROCm)
#   --update           rewrite expected_output/ from this run and show what changed;
#                      refused when any script exits non-zero, times out, or (with
#                      --require-gpu) did not run on the GPU
#   --timeout SECONDS  stop and fail a script still running after SECONDS (default 120;
#                      0 turns the timeout off)
#   -h, --help         show this help
# Environment:
#   PYTHON             the interpreter to verify (default: .venv/bin/python beside this
#                      script, as `make check` and the README's setup create it; else python3)
# Exit codes:
#   0    every script passed
#   1    a script failed: its output differs, it exited non-zero, or it timed out
#   2    usage or environment error (unknown flag, no torch or triton, no GPU with
#        --require-gpu, a PyTorch/Triton/NumPy combination known to print garbage)
#   130  interrupted by Ctrl-C (SIGINT); 143 by SIGTERM. Every script was stopped.
set -euo pipefail

readonly ADDRESS_MASK='0x<address>'
readonly STDERR_TAIL_LINES=25
# Measured, four scripts at once (logs under benchmarks/results/, listed in docs/provenance.md):
#   CPU interpreter, two cores: 5.3 s in all; one core (taskset -c 0): 10.0 s (cpu_session.log)
#   H200, cold Triton cache: 5.5 to 5.8 s a script, 9.3 s in all (h200_gpu_session.log)
#   linux/arm64 container under qemu emulation on two x86 cores: 50 to 52 s a script
#   (container_arm64.log)
# 120 s is ten times the slowest native run and twice the emulated one, so it stops no
# healthy run measured; the timeout message names the slow cases and --timeout.
readonly DEFAULT_TIMEOUT_SECONDS=120
readonly POLL_SECONDS=0.1

PYTHON=${PYTHON:-}
# How PYTHON was chosen: "set" (by the reader), "venv" (.venv found) or "default" (python3).
python_source="set"
# PYTHON as the messages show it: .venv/bin/python rather than its absolute path.
python_shown=""
require_gpu=0
update=0
timeout_seconds=$DEFAULT_TIMEOUT_SECONDS
scripts=()
workdir=""
# Per script, by its index in scripts[]: the process (and process group) id running it.
job_pids=()
scripts_started=0
# 1 once the "interrupted by" line is printed, so that it is printed once.
interrupt_reported=0

# This file, by a path that still holds once main has changed into its directory.
SELF="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
readonly SELF

usage() {
  sed -n '/^# Usage:/,/^set -euo/p' "$SELF" | sed -e '$d' -e 's/^# \{0,1\}//'
}

# Errors go to the stderr the checker started with (fd 3 once main has saved it),
# even from inside the timed block, whose stderr is redirected to a file.
err() {
  if { true >&3; } 2>/dev/null; then
    printf 'check_outputs.sh: %s\n' "$*" >&3
  else
    printf 'check_outputs.sh: %s\n' "$*" >&2
  fi
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

# Each script once: two runs of one script would write the same files, and the first
# to finish would mark both done.
add_script() {
  local known
  for known in ${scripts[@]+"${scripts[@]}"}; do
    if [ "$known" = "$1" ]; then return 0; fi
  done
  scripts+=("$1")
}

set_timeout() {
  [[ "$1" =~ ^[0-9]+$ ]] || usage_error "--timeout takes a whole number of seconds (0 for none), not '$1'"
  timeout_seconds=$((10#$1))
}

parse_args() {
  local only_scripts=0 resolved
  while [ $# -gt 0 ]; do
    if [ "$only_scripts" -eq 0 ]; then
      case "$1" in
        --require-gpu) require_gpu=1; shift; continue ;;
        --update) update=1; shift; continue ;;
        --timeout)
          [ $# -ge 2 ] || usage_error "--timeout needs a number of seconds"
          set_timeout "$2"; shift 2; continue ;;
        --timeout=*) set_timeout "${1#--timeout=}"; shift; continue ;;
        -h | --help) usage; exit 0 ;;
        --) only_scripts=1; shift; continue ;;
        -*) usage_error "unknown option: $1" ;;
      esac
    fi
    # resolve_script exits 2 from its subshell; set -e carries that out here, on the
    # assignment (an argument to add_script would hide the status).
    resolved=$(resolve_script "$1")
    add_script "$resolved"
    shift
  done
  if [ ${#scripts[@]} -eq 0 ]; then
    local script
    for script in [0-9][0-9]_*.py; do
      if [ -f "$script" ]; then scripts+=("$script"); fi
    done
  fi
  [ ${#scripts[@]} -gt 0 ] || usage_error "no NN_*.py scripts found in $(pwd)"
}

# Where Triton cannot be installed, the one message a reader needs: why, and what works.
no_triton_here() {
  case "$(uname -s 2>/dev/null)" in
    Darwin)
      printf '%s\n' "Triton publishes no macOS packages, so its kernels cannot run on macOS itself." \
        "Routes that work: the container (docker build -t chapter17 . && docker run --rm chapter17)," \
        "a Linux machine or VM, or a Linux notebook such as Google Colab. See README.md, 'Where it runs'." ;;
    MINGW* | MSYS* | CYGWIN*)
      printf '%s\n' "Triton publishes no Windows packages; on Windows it comes from the community build" \
        "triton-windows, which needs an NVIDIA GPU: $python_shown -m pip install -r requirements.txt installs it." \
        "Without an NVIDIA GPU, use WSL2 or the container. See README.md, 'Where it runs'." ;;
    *) install_command ;;
  esac
}

# The exact command that installs what is missing, for the interpreter in use.
install_command() {
  case "$python_source" in
    venv)
      printf '%s\n' "install the pinned versions into it: $python_shown -m pip install -r requirements.txt" ;;
    default)
      printf '%s\n' "there is no .venv beside this script. Create it, with the pinned versions, by running:" \
        "  make check" \
        "or, without make: python3 -m venv .venv && .venv/bin/python -m pip install -r requirements.txt" \
        "(README.md, 'Ways in', gives the CPU-only route). ./check_outputs.sh then finds .venv on its own." ;;
    *)
      printf '%s\n' "install the pinned versions into it: $python_shown -m pip install -r requirements.txt" ;;
  esac
}

# PYTHON when the reader set it; else .venv's interpreter beside this script (the checker
# runs from its own directory); else python3.
choose_python() {
  local candidate
  if [ -n "$PYTHON" ]; then
    python_shown=$PYTHON
    return 0
  fi
  for candidate in .venv/bin/python .venv/Scripts/python.exe; do
    if [ -x "$candidate" ]; then
      PYTHON="$PWD/$candidate"
      python_shown=$candidate
      python_source=venv
      return 0
    fi
  done
  PYTHON=python3
  python_shown=python3
  python_source=default
}

# Exits 2, saying what to install, unless $PYTHON runs and has torch, triton and
# numpy. It only looks the packages up, which is quick; probe_environment imports them.
check_packages() {
  if ! command -v "$PYTHON" >/dev/null 2>&1; then
    err "cannot run PYTHON=$python_shown: no such interpreter. Set PYTHON=/path/to/python, or run 'make check' to create .venv (found on its own when PYTHON is unset)."
    exit 2
  fi
  local report status=0
  report=$("$PYTHON" -c '
import importlib.util
import sys

missing = [m for m in ("torch", "triton", "numpy") if importlib.util.find_spec(m) is None]
if missing:
    print(" ".join(missing))
    sys.exit(3)
' 2>&1) || status=$?
  if [ "$status" -eq 3 ]; then
    err "$python_shown cannot import: $report"
    case " $report " in
      *" triton "*) err "$(no_triton_here)" ;;
      *) err "$(no_triton_here | tail -n 1)" ;;
    esac
    exit 2
  elif [ "$status" -ne 0 ]; then
    err "$python_shown failed to start (exit status $status)${report:+: $report}"
    exit 2
  fi
}

# Imports torch and prints, one "key<TAB>value" a line, what a bug report needs:
# versions, the device (compute capability or gfx architecture, CUDA or HIP version),
# the backend the scripts will choose (as they choose it), and any combination known
# to fail: "fatal" lines for those that would print wrong numbers, "warning" otherwise.
readonly PROBE='
import importlib.metadata
import os
import re
import sys


def version(package):
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "(version unknown)"


def release(text):
    match = re.match(r"(\d+)\.(\d+)", text)
    return (int(match[1]), int(match[2])) if match else (0, 0)


import torch  # noqa: E402

triton_version = version("triton-windows") if sys.platform == "win32" else version("triton")
numpy_version = version("numpy")
print(f"python\t{sys.version.split()[0]} ({sys.executable})")
print(f"torch\t{torch.__version__}")
print(f"triton\t{triton_version}")
print(f"numpy\t{numpy_version}")
# As the scripts read it (and Triton 3.7 does): any of these, in any case, switches it on.
interpret_setting = os.environ.get("TRITON_INTERPRET", "")
interpret = interpret_setting.lower() in ("1", "true", "yes", "y", "on")
if not interpret and torch.cuda.is_available():
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    if torch.version.hip:
        arch = getattr(props, "gcnArchName", "unknown").split(":")[0]
        print("backend\tROCm")
        print(f"device\t{props.name}, {arch}, HIP {torch.version.hip}")
    else:
        print("backend\tCUDA")
        print(f"device\t{props.name}, compute capability {props.major}.{props.minor}, CUDA {torch.version.cuda}")
        if (props.major, props.minor) == (7, 5) and release(triton_version) < (3, 3):
            print(f"warning\tTriton {triton_version} cannot compile bf16 kernels for this GPU (sm_75): the "
                  "chapter'"'"'s fp32 scripts run, bf16 input does not. Triton 3.3 or newer (torch 2.7+) can.")
        if props.major in (10, 12) and release(triton_version) < (3, 3):
            print(f"warning\tTriton {triton_version} cannot compile for this Blackwell GPU (sm_{props.major}0: its "
                  "ptxas does not know it; triton-lang/triton#5950). Use torch 2.7 or newer (Triton 3.3 or newer).")
else:
    why = f"TRITON_INTERPRET={interpret_setting} is set" if interpret else f"torch {torch.__version__} sees no GPU"
    print("backend\tinterpreter")
    print(f"device\tnone ({why}): the Triton interpreter on the CPU, with numpy {numpy_version}")
    if release(triton_version) < (3, 2) and release(numpy_version) >= (2, 0):
        print(f"fatal\tTriton {triton_version}'"'"'s interpreter stores nothing under NumPy {numpy_version}: every "
              "number the scripts printed would be uninitialised memory. Fix: "
              f"{sys.executable} -m pip install \"numpy<2\", or use torch 2.6 or newer (Triton 3.2 or newer).")
'

probe_environment() {
  local status=0
  "$PYTHON" -c "$PROBE" >"$workdir/probe" 2>"$workdir/probe.stderr" || status=$?
  if [ "$status" -ne 0 ]; then
    err "$python_shown could not import torch (exit status $status); the end of its stderr:"
    tail -n "$STDERR_TAIL_LINES" "$workdir/probe.stderr" | sed 's/^/  | /' >&3
    return 2
  fi
}

# A value the probe reported, or nothing.
probed() {
  sed -n "s/^$1	//p" "$workdir/probe"
}

print_header() {
  local label value
  printf 'Checking Chapter 17 output\n'
  for label in python torch triton numpy device; do
    value=$(probed "$label")
    # numpy matters only to the interpreter, which computes with it.
    if [ "$label" = numpy ] && [ "$(probed backend)" != interpreter ]; then continue; fi
    printf '  %-8s %s\n' "$label" "$value"
  done
  printf '  %-8s %s\n' timeout "$([ "$timeout_seconds" -eq 0 ] && echo none || echo "$timeout_seconds s a script")"
  probed warning | sed 's/^/warning: /'
  printf '\n'
}

mask_addresses() {
  sed -E "s/0x[0-9a-fA-F]+/$ADDRESS_MASK/g" "$1"
}

# Runs one script, leaving its stdout, stderr and seconds in $workdir, then its exit
# status, written last and renamed into place, so that the status file means "done".
run_script() {
  local script=$1 out=$workdir/${1%.py}
  local TIMEFORMAT=%R status=0
  { time "$PYTHON" "$script" >"$out.stdout" 2>"$out.stderr" || status=$?; } 2>"$out.seconds"
  printf '%s\n' "$status" >"$out.status.partial"
  mv "$out.status.partial" "$out.status"
}

# Each script runs in a process group of its own (job control on while it starts), so
# that a timeout or an interrupt can stop it and every process it started, and so that
# its SIGINT is not ignored, as bash does for background jobs without job control.
start_scripts() {
  local i
  scripts_started=$SECONDS
  for i in "${!scripts[@]}"; do
    set -m
    run_script "${scripts[$i]}" </dev/null 3>&- &
    job_pids[i]=$!
    set +m
  done
}

# SIGTERM to a script's process group; SIGKILL to whatever is left a second later.
stop_process_groups() {
  local pid tries=0 alive=1
  [ $# -gt 0 ] || return 0
  for pid in "$@"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  while [ "$alive" -eq 1 ] && [ "$tries" -lt 10 ]; do
    alive=0
    for pid in "$@"; do
      if kill -0 -- "-$pid" 2>/dev/null; then alive=1; fi
    done
    if [ "$alive" -eq 1 ]; then sleep "$POLL_SECONDS"; tries=$((tries + 1)); fi
  done
  for pid in "$@"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
  for pid in "$@"; do wait "$pid" 2>/dev/null || true; done
}

# The process groups of scripts that have not finished.
running_jobs() {
  local i
  for i in "${!job_pids[@]}"; do
    if [ ! -f "$workdir/${scripts[$i]%.py}.status" ] && [ ! -f "$workdir/${scripts[$i]%.py}.timedout" ]; then
      printf '%s\n' "${job_pids[$i]}"
    fi
  done
}

stop_running_scripts() {
  local pids
  if [ -z "$workdir" ] || [ ${#job_pids[@]} -eq 0 ]; then return 0; fi
  pids=$(running_jobs)
  # Word splitting is wanted: one process group id a word.
  # shellcheck disable=SC2086
  if [ -n "$pids" ]; then stop_process_groups $pids; fi
}

report_interrupt() {
  [ "$interrupt_reported" -eq 0 ] || return 0
  interrupt_reported=1
  err "interrupted by SIG$1: every running script was stopped"
}

# On every exit. A Ctrl-C or SIGTERM goes to the checker's whole process group, so it
# also stops the helper running in the foreground (a sleep, a sed). Bash can then leave
# through set -e, with that helper's status (130 or 143), before it runs the signal's
# trap: the tests saw it when the signal came just after the header. So the exit status
# names the signal here too. Only the checker's own shell cleans up, never a subshell,
# and it goes on to the end (set +e) even if a helper of its own is stopped.
cleanup() {
  local status=$?
  [ "${BASHPID:-$$}" = "$$" ] || return 0  # BASHPID: bash 4 or newer
  set +e
  stop_running_scripts
  case $status in
    130) report_interrupt INT ;;
    143) report_interrupt TERM ;;
  esac
  if [ -n "$workdir" ]; then rm -rf "$workdir"; fi
}

on_signal() {
  local name=$1 code=$2
  trap - INT TERM
  set +e
  stop_running_scripts
  report_interrupt "$name"
  exit "$code"
}

# The line each script prints on stderr naming where its kernels ran, e.g.
# "running on NVIDIA H200 (CUDA)".
backend_of() {
  grep -m 1 -E -e '^running on .* \((CUDA|ROCm)\)$' -e 'through the Triton interpreter$' "$workdir/${1%.py}.stderr" ||
    printf 'unknown (the script printed no backend line)\n'
}

# Prints PASS or FAIL for one script, with the diff and its stderr's tail on failure.
# Returns 0 for PASS, 1 when its output is wrong, 2 when it exited non-zero, timed out or
# (with --require-gpu) did not run on the GPU: the failures that --update must not record.
report_script() {
  local script=$1 name=${1%.py}
  local out=$workdir/$name expected=expected_output/$name.txt
  local status seconds verdict=0
  if [ -f "$out.timedout" ]; then
    printf 'FAIL  %-28s %6s s   timed out after %s s: stopped, with every process it started\n' \
      "$script" "$(cat "$out.timedout")" "$timeout_seconds"
    printf '      the end of its stderr:\n'
    tail -n "$STDERR_TAIL_LINES" "$out.stderr" | sed 's/^/      | /'
    timed_out=$((timed_out + 1))
    return 2
  fi
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
  # Output from another backend is no evidence for this one: like a crash, it blocks --update.
  if [ "$require_gpu" -eq 1 ] && ! backend_of "$script" | grep -E '\((CUDA|ROCm)\)$' >/dev/null; then
    [ "$verdict" -eq 1 ] || printf 'FAIL  %-28s %6s s\n' "$script" "$seconds"
    printf '      did not run on the GPU: %s\n' "$(backend_of "$script")"
    verdict=2
  fi
  if [ "$status" -ne 0 ]; then
    [ "$verdict" -ne 0 ] || printf 'FAIL  %-28s %6s s\n' "$script" "$seconds"
    printf '      exited with status %s; the end of its stderr:\n' "$status"
    tail -n "$STDERR_TAIL_LINES" "$out.stderr" | sed 's/^/      | /'
    return 2
  fi
  if [ "$verdict" -eq 0 ]; then
    printf 'PASS  %-28s %6s s\n' "$script" "$seconds"
  fi
  return "$verdict"
}

passed=0
failed=0
crashed=0
timed_out=0

count_result() {
  case "$1" in
    0) passed=$((passed + 1)) ;;
    2) failed=$((failed + 1)); crashed=$((crashed + 1)) ;;
    *) failed=$((failed + 1)) ;;
  esac
}

# Waits for the scripts, stopping any that outlive the timeout, and reports each as
# soon as it and every script before it are done.
wait_and_report() {
  local next=0 count=${#scripts[@]} i name result
  local done_flags=()
  for i in "${!scripts[@]}"; do done_flags[i]=0; done
  while [ "$next" -lt "$count" ]; do
    for i in "${!scripts[@]}"; do
      [ "${done_flags[$i]}" -eq 0 ] || continue
      name=${scripts[$i]%.py}
      if [ -f "$workdir/$name.status" ]; then
        done_flags[i]=1
      # SECONDS counts whole seconds, so a difference of N can be as little as N - 1 s of real
      # time; waiting for N + 1 stops a script after at least N s, never before.
      elif [ "$timeout_seconds" -gt 0 ] && [ $((SECONDS - scripts_started)) -gt "$timeout_seconds" ]; then
        stop_process_groups "${job_pids[$i]}"
        printf '%s\n' "$((SECONDS - scripts_started))" >"$workdir/$name.timedout"
        done_flags[i]=1
      fi
    done
    while [ "$next" -lt "$count" ] && [ "${done_flags[$next]}" -eq 1 ]; do
      result=0
      report_script "${scripts[$next]}" || result=$?
      count_result "$result"
      next=$((next + 1))
    done
    if [ "$next" -lt "$count" ]; then sleep "$POLL_SECONDS"; fi
  done
}

# From the scripts' start to the last result. With --require-gpu nothing runs before
# the GPU is confirmed; otherwise the probe (which imports torch, a second or two)
# runs while the scripts already do.
run_and_report() {
  if [ "$require_gpu" -eq 1 ]; then
    probe_environment || exit 2
    refuse_known_failures
    start_scripts
  else
    start_scripts
    probe_environment || exit 2
    refuse_known_failures
  fi
  print_header
  wait_and_report
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

# Exits 2 when the probe found a combination that would print wrong numbers, or
# (with --require-gpu) that the scripts would not run on a GPU.
refuse_known_failures() {
  local fatal
  fatal=$(probed fatal)
  if [ -n "$fatal" ]; then
    err "$fatal"
    exit 2
  fi
  if [ "$require_gpu" -eq 1 ] && [ "$(probed backend)" = interpreter ]; then
    err "--require-gpu: $(probed device | sed 's/^none (\(.*\)):.*/\1/'), so the scripts would run in the Triton interpreter"
    exit 2
  fi
}

main() {
  # A relative PYTHON=venv/bin/python names a file from where the reader stands.
  case "$PYTHON" in
    /*) ;;
    */*) PYTHON="$PWD/$PYTHON" ;;
  esac
  cd "$(dirname "$SELF")"
  exec 3>&2
  parse_args "$@"
  choose_python
  check_packages

  trap cleanup EXIT
  trap 'on_signal INT 130' INT
  trap 'on_signal TERM 143' TERM
  workdir=$(mktemp -d "${TMPDIR:-/tmp}/check_outputs.XXXXXX")

  local TIMEFORMAT=%R
  { time run_and_report; } 2>"$workdir/wall.seconds"
  printf '\n%d script(s) run concurrently in %s s of wall time\n' "${#scripts[@]}" "$(cat "$workdir/wall.seconds")"

  if [ "$update" -eq 1 ] && [ "$failed" -gt 0 ]; then
    if [ "$crashed" -gt 0 ]; then
      err "--update refused: $crashed script(s) exited non-zero, timed out or did not run on the GPU; expected_output/ is unchanged."
      printf '%d passed, %d failed\n' "$passed" "$failed"
      exit 1
    fi
    update_expected
    passed=$((passed + failed))
    failed=0
  fi

  # grep reads all its input (no -q): an early exit would SIGPIPE the loop, and pipefail would
  # turn a match into a failure.
  local script
  if ! for script in "${scripts[@]}"; do backend_of "$script"; done | grep -E '\((CUDA|ROCm)\)$' >/dev/null; then
    printf 'note: no GPU was verified; the scripts did not run on a GPU. Use --require-gpu to insist on one.\n'
  fi
  if [ "$timed_out" -gt 0 ]; then
    err "$timed_out script(s) timed out. If they are only slow here (the Triton interpreter on one slow core, or a container emulating another CPU, which took 52 s a script on two cores), allow more time: ./check_outputs.sh --timeout SECONDS (0 for no limit)"
  fi
  if [ "$failed" -gt "$timed_out" ]; then
    err "see a script's whole output with: $python_shown <script>. If its new output is right, record it with: ./check_outputs.sh --update <script>"
  fi
  printf '%d passed, %d failed\n' "$passed" "$failed"
  [ "$failed" -eq 0 ]
}

main "$@"
