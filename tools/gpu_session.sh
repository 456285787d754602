#!/usr/bin/env bash
# gpu_session.sh: everything this repository measures on a GPU, in one run, as recorded in
# README.md and benchmarks/results/: the checker with a cold and a warm Triton cache, the
# test suite, the extras (training demo with its plot, triton_op, the live autograd
# diagrams) and the benchmarks.
#
# Usage: tools/gpu_session.sh OUTPUT_DIR      (PYTHON: the interpreter, default python3)
#   OUTPUT_DIR  where plots and result files go, relative to where it is started
# Exit code: 0 when every step passed; 1 otherwise (each step's status is in the log).
set -uo pipefail

PYTHON=${PYTHON:-python3}
export PYTHON PYTHONUNBUFFERED=1

step() {
  local name=$1 status
  shift
  printf '\n===== %s: %s\n' "$name" "$*"
  local TIMEFORMAT="----- $name: %R s of wall time"
  time "$@"
  status=$?
  printf -- '----- %s: exit %s\n' "$name" "$status"
  [ "$status" -eq 0 ] || failures=$((failures + 1))
}

main() {
  local out=${1:?usage: tools/gpu_session.sh OUTPUT_DIR}
  failures=0
  # OUTPUT_DIR is the reader's, from where they started: made and resolved before the cd.
  mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 2
  cd "$(dirname "$0")/.." || exit 2
  printf 'commit %s\n' "$(git rev-parse HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv 2>&1
  "$PYTHON" -c 'import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__, torch.version.cuda)'

  # A cold cache for the first checker run, removed at the end.
  TRITON_CACHE_DIR=$(mktemp -d)
  export TRITON_CACHE_DIR
  trap 'rm -rf "$TRITON_CACHE_DIR"' EXIT
  step checker-cold ./check_outputs.sh --require-gpu
  step checker-warm ./check_outputs.sh --require-gpu
  step pytest "$PYTHON" -m pytest -q -rs -p no:cacheprovider
  step train-fp32 "$PYTHON" extras/train_mlp.py --steps 200 --batch 256 --plot "$out/train_mlp.png"
  step train-bf16 "$PYTHON" extras/train_mlp.py --steps 200 --batch 256 --bf16 --plot "$out/train_mlp_bf16.png"
  step train-compile "$PYTHON" extras/train_mlp.py --steps 200 --batch 256 --compile --plot "$out/train_mlp_compile.png"
  step train-checkpoint "$PYTHON" extras/train_mlp.py --steps 30 --checkpoint --plot "$out/train_mlp_checkpoint.png"
  step triton-op "$PYTHON" extras/triton_op.py
  printf '\n%s step(s) failed\n' "$failures"
  [ "$failures" -eq 0 ]
}

main "$@"
