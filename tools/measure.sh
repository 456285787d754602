#!/usr/bin/env bash
# measure.sh: everything this repository measures, in one logged run, as recorded in
# README.md, docs/ and benchmarks/results/. On a GPU (the default steps): the checker with a
# cold and a warm Triton cache, the test suite, the extras (training demo, triton_op, the
# live autograd diagrams), the notebook, and the benchmarks. On the CPU (--cpu): the checker
# on two cores and on one, the test suite, the extras with their defaults, the notebook.
#
# Usage: tools/measure.sh OUTPUT_DIR [--cpu] [STEP ...]
#   OUTPUT_DIR  where plots and result files go, relative to where it is started
#   --cpu       the CPU steps instead of the GPU ones
#   STEP        run only these steps (default: the GPU or CPU list, in order)
#   --list      print both lists and exit
# Environment: PYTHON, the interpreter (default python3).
# Exit code: 0 when every step passed; 1 otherwise (each step's status is in the log); 2 on
# a usage error.
set -uo pipefail

PYTHON=${PYTHON:-python3}
export PYTHON PYTHONUNBUFFERED=1

STEPS=(checker-cold checker-warm interpret-spellings pytest train-fp32 train-bf16 train-compile
  train-checkpoint triton-op diagram diagram-overhead notebook listing-failures large-tensor-listing large-tensor
  bandwidth-blocks mlp-step mlp-explain)
CPU_STEPS=(checker checker-one-core pytest train-defaults triton-op diagram diagram-overhead-cpu notebook
  listing-failures)

# shellcheck source=tools/steps.sh
. "$(dirname "$0")/steps.sh"

# Each spelling Triton reads as "on" must keep --require-gpu from passing (exit 2).
interpret_spellings() {
  local spelling status
  for spelling in 1 true TRUE yes on; do
    status=0
    TRITON_INTERPRET=$spelling ./check_outputs.sh --require-gpu 04 >/dev/null 2>&1 || status=$?
    printf 'TRITON_INTERPRET=%-5s ./check_outputs.sh --require-gpu 04: exit %s\n' "$spelling" "$status"
    [ "$status" -eq 2 ] || return 1
  done
  TRITON_INTERPRET=true "$PYTHON" 04_standalone_complete.py 2>&1 >/dev/null | head -n 1
}

# The chapter's diagrams on this GPU, against the golden files made on the CPU.
diagram_matches_golden() {
  local format golden status=0
  for format in ascii mermaid dot; do
    golden=extras/expected_output/autograd_diagram.txt
    [ "$format" = ascii ] || golden=extras/expected_output/autograd_diagram.$format.txt
    if "$PYTHON" extras/autograd_diagram.py --format "$format" 2>/dev/null | diff -u "$golden" -; then
      printf '%s: byte-identical to %s\n' "$format" "$golden"
    else
      status=1
    fi
  done
  return "$status"
}

# The printed listing past 2**31 elements. It is expected to fail: that is the measurement.
listing_past_2_31() {
  local status=0
  "$PYTHON" benchmarks/large_tensor.py --script listings/04_standalone_complete.py || status=$?
  [ "$status" -ne 0 ]
}

bandwidth_blocks() {
  local block
  for block in 1024 2048; do
    "$PYTHON" benchmarks/gelu_bandwidth.py --dtypes bf16 --min-log2 26 --max-log2 30 --block "$block" \
      --label "bf16_block$block" --out "$out" || return 1
  done
}

# Recording's cost on the 12-block stack, at a small and a large batch.
diagram_overhead() {
  "$PYTHON" extras/autograd_diagram.py --overhead --batch 256 &&
    "$PYTHON" extras/autograd_diagram.py --overhead --batch 8192
}

notebook() {
  "$PYTHON" tools/run_notebook.py notebooks/chapter17.ipynb --output "$out/chapter17.ipynb"
}

tree_description() {
  local described
  described=$(git describe --always --dirty 2>/dev/null) || { echo unknown; return; }
  case "$described" in
    *-dirty) printf '%s (uncommitted diff sha256 %s)\n' "$described" "$(git diff HEAD | sha256sum | cut -c1-16)" ;;
    *) printf '%s\n' "$described" ;;
  esac
}

run_step() {
  case "$1" in
    checker-cold) step "$1" ./check_outputs.sh --require-gpu ;;
    checker-warm) step "$1" ./check_outputs.sh --require-gpu ;;
    interpret-spellings) step "$1" interpret_spellings ;;
    pytest) step "$1" "$PYTHON" -m pytest -q -rs -p no:cacheprovider ;;
    train-fp32) step "$1" "$PYTHON" extras/train_mlp.py --steps 200 --batch 256 --plot "$out/train_mlp.png" ;;
    train-bf16) step "$1" "$PYTHON" extras/train_mlp.py --steps 200 --batch 256 --bf16 --plot "$out/train_mlp_bf16.png" ;;
    train-compile) step "$1" "$PYTHON" extras/train_mlp.py --steps 200 --batch 256 --compile --plot "$out/train_mlp_compile.png" ;;
    train-checkpoint) step "$1" "$PYTHON" extras/train_mlp.py --steps 30 --checkpoint --plot "$out/train_mlp_checkpoint.png" ;;
    triton-op) step "$1" "$PYTHON" extras/triton_op.py ;;
    diagram) step "$1" diagram_matches_golden ;;
    diagram-overhead) step "$1" diagram_overhead ;;
    notebook) step "$1" notebook ;;
    large-tensor-listing) step "$1" listing_past_2_31 ;;
    large-tensor) step "$1" "$PYTHON" benchmarks/large_tensor.py ;;
    bandwidth-blocks) step "$1" bandwidth_blocks ;;
    mlp-step) step "$1" "$PYTHON" benchmarks/mlp_step.py --out "$out" ;;
    checker) step "$1" ./check_outputs.sh ;;
    checker-one-core) step "$1" taskset -c 0 ./check_outputs.sh ;;
    train-defaults) step "$1" "$PYTHON" extras/train_mlp.py --plot "$out/train_mlp.png" ;;
    diagram-overhead-cpu) step "$1" "$PYTHON" extras/autograd_diagram.py --overhead --batch 64 ;;
    mlp-explain) step "$1" "$PYTHON" benchmarks/mlp_step.py --explain --models 1x4096,8x1024 --dtypes fp32,bf16 ;;
    listing-failures) step "$1" "$PYTHON" tools/listing_failures.py $large ;;
    *) printf 'measure.sh: unknown step %s; steps: %s; CPU steps: %s\n' "$1" "${STEPS[*]}" "${CPU_STEPS[*]}" >&2; exit 2 ;;
  esac
}

main() {
  if [ "${1:-}" = --list ]; then printf 'GPU: %s\nCPU: %s\n' "${STEPS[*]}" "${CPU_STEPS[*]}"; exit 0; fi
  case "${1:-}" in
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    "") echo "usage: tools/measure.sh OUTPUT_DIR [--cpu] [STEP ...] (tools/measure.sh --help)" >&2; exit 2 ;;
    -*) echo "measure.sh: OUTPUT_DIR comes first, not the option $1 (tools/measure.sh OUTPUT_DIR $1 ...)" >&2; exit 2 ;;
  esac
  out=$1
  shift
  local defaults=("${STEPS[@]}") name
  if [ "${1:-}" = --cpu ]; then defaults=("${CPU_STEPS[@]}"); shift; fi
  local chosen=("$@")
  [ ${#chosen[@]} -gt 0 ] || chosen=("${defaults[@]}")
  # Every step name is checked before any step runs: a typo must not cost a long run first.
  for name in "${chosen[@]}"; do
    if [[ " ${STEPS[*]} ${CPU_STEPS[*]} " != *" $name "* ]]; then
      printf 'measure.sh: unknown step %s; steps: %s; CPU steps: %s\n' "$name" "${STEPS[*]}" "${CPU_STEPS[*]}" >&2
      exit 2
    fi
  done
  # On a GPU, listing-failures also runs the 2**31 + 4096 case (about 40 GiB of GPU memory).
  large=""
  [ "${defaults[0]}" = checker ] || large=--large
  failures=0
  # OUTPUT_DIR is the reader's, from where they started: made and resolved before the cd.
  mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 2
  cd "$(dirname "$0")/.." || exit 2
  # The tree measured: git describe, with -dirty and a hash of the uncommitted diff where the tree
  # has changes. COMMIT, where the tree is a copy without git history, names it instead.
  printf 'tree %s\n' "${COMMIT:-$(tree_description)}"
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv 2>&1 ||
    printf 'no nvidia-smi; %s CPU core(s)\n' "$(nproc)"
  "$PYTHON" -c 'import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__, torch.version.cuda)'

  # A cold cache for the first checker run, removed at the end.
  TRITON_CACHE_DIR=$(mktemp -d)
  export TRITON_CACHE_DIR
  trap 'rm -rf "$TRITON_CACHE_DIR"' EXIT
  for name in "${chosen[@]}"; do run_step "$name"; done
  printf '\n%s step(s) failed\n' "$failures"
  [ "$failures" -eq 0 ]
}

main "$@"
