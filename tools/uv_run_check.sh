#!/usr/bin/env bash
# uv_run_check.sh: the `uv run` route as a reader takes it: in an empty folder, with an empty
# uv cache, `uv run 04_standalone_complete.py` installs the script's PEP 723 pins and runs it;
# then again with the cache warm. Each run's stdout is compared with expected_output/.
#
# Usage: tools/uv_run_check.sh            (UV: the uv to use, default: uv on PATH, else .venv's)
# It downloads the pinned torch (a CUDA build on Linux, several GB) into a temporary cache,
# removed at the end. Exit code: 0 when both runs printed the expected output, 1 otherwise, 2 for an
# argument (it takes none; -h and --help print this) or a uv that does not run.
set -uo pipefail

work=""  # the temporary folder, removed on exit

main() {
  local repo uv status=0 run
  repo=$(cd "$(dirname "$0")/.." && pwd)
  case "${1-}" in
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; return 0 ;;
    "") ;;
    *) echo "uv_run_check.sh: takes no arguments, not '$*' (tools/uv_run_check.sh --help)" >&2; return 2 ;;
  esac
  uv=${UV:-$(command -v uv || echo "$repo/.venv/bin/uv")}
  if ! "$uv" --version >/dev/null 2>&1; then  # before the download, not after it, as a wrong output
    echo "uv_run_check.sh: no uv runs as $uv (install uv, or name one in UV)" >&2
    return 2
  fi
  work=$(mktemp -d)
  trap '[ -z "$work" ] || rm -rf "$work"' EXIT
  mkdir "$work/empty" "$work/cache"
  cp "$repo/04_standalone_complete.py" "$work/empty/"
  printf 'uv: %s\n' "$("$uv" --version)"
  for run in cold warm; do
    local TIMEFORMAT="----- $run: %R s of wall time"
    printf '\n===== %s cache: uv run 04_standalone_complete.py\n' "$run"
    time (cd "$work/empty" && UV_CACHE_DIR="$work/cache" "$uv" run --no-project 04_standalone_complete.py \
      >"$work/$run.stdout" 2>"$work/$run.stderr")
    if diff -u "$repo/expected_output/04_standalone_complete.txt" "$work/$run.stdout"; then
      printf 'stdout byte-identical to expected_output/04_standalone_complete.txt\n'
    else
      status=1
      tail -n 20 "$work/$run.stderr"
    fi
  done
  return "$status"
}

main "$@"
