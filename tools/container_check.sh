#!/usr/bin/env bash
# container_check.sh: build the companion's image and run, inside it, the checker and a
# subset of the tests, timing each step: the route a reader takes with Docker (on an Apple
# Silicon Mac, the linux/arm64 image).
#
# Usage: tools/container_check.sh [--platform linux/arm64] [--build-arg NAME=VALUE ...] [--tests]
#   --platform P     build and run for P (default: the machine's own)
#   --build-arg A    passed to the build, e.g. BASE=localhost/python-base
#   --tests          also run the chapter-claims, against-PyTorch, hardening, drift,
#                    TRITON_INTERPRET and diagram tests inside the image
# Environment: CONTAINER, the command with docker's build and run verbs (default: docker, or
#   podman where docker is absent); IMAGE, the tag (default chapter17, or chapter17-arm64).
# Exit code: 0 when every step passed, 1 otherwise, 2 on a usage error.
set -uo pipefail

TEST_SUBSET=(tests/test_chapter_claims.py tests/test_against_pytorch.py tests/test_hardening.py tests/test_drift.py
  tests/test_interpret_switch.py tests/test_autograd_diagram.py)

# shellcheck source=tools/steps.sh
. "$(dirname "$0")/steps.sh"

main() {
  local platform=() build_args=() tests=0
  while [ $# -gt 0 ]; do
    case "$1" in
      --platform) [ $# -ge 2 ] || { echo "container_check.sh: --platform needs a value" >&2; exit 2; }
        platform=(--platform "$2"); shift 2 ;;
      --build-arg) [ $# -ge 2 ] || { echo "container_check.sh: --build-arg needs a value" >&2; exit 2; }
        build_args+=(--build-arg "$2"); shift 2 ;;
      --tests) tests=1; shift ;;
      *) echo "container_check.sh: unknown argument $1" >&2; exit 2 ;;
    esac
  done
  local container=${CONTAINER:-$(command -v docker || command -v podman)}
  [ -n "$container" ] || { echo "container_check.sh: neither docker nor podman found; set CONTAINER" >&2; exit 2; }
  local image=${IMAGE:-chapter17}
  if [ ${#platform[@]} -gt 0 ] && [ -z "${IMAGE:-}" ]; then image=chapter17-${platform[1]##*/}; fi
  # The tests need the contributors' requirements in the image (the Dockerfile's default is the reader's).
  if [ "$tests" -eq 1 ]; then build_args+=(--build-arg REQUIREMENTS=requirements-dev.txt); fi
  failures=0
  cd "$(dirname "$0")/.." || exit 2
  printf 'commit %s; host %s; %s\n' "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$(uname -m)" "$container"
  step build "$container" build ${platform[@]+"${platform[@]}"} ${build_args[@]+"${build_args[@]}"} -t "$image" .
  step arch "$container" run --rm ${platform[@]+"${platform[@]}"} "$image" bash -c 'uname -m; python --version'
  step checker "$container" run --rm ${platform[@]+"${platform[@]}"} "$image" ./check_outputs.sh
  if [ "$tests" -eq 1 ]; then
    step tests "$container" run --rm ${platform[@]+"${platform[@]}"} "$image" \
      python -m pytest -q -p no:cacheprovider "${TEST_SUBSET[@]}"
  fi
  printf '\n%s step(s) failed\n' "$failures"
  [ "$failures" -eq 0 ]
}

main "$@"
