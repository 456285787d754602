# steps.sh: sourced by tools/measure.sh and tools/container_check.sh. One function, step, which
# runs a command under a "===== NAME: COMMAND" header, then prints its wall time and exit
# status, and counts a failure in the caller's `failures`.
# shellcheck shell=bash

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
