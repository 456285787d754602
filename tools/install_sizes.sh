#!/usr/bin/env bash
# install_sizes.sh: what the reader's install costs, in bytes and seconds, on Linux x86_64.
#
#   1. `make check` from PyPI: downloads every wheel that requirements.txt resolves to for
#      Linux x86_64 and Python 3.11 (PyPI's torch 2.13.0 is the CUDA build there, with its
#      nvidia-* wheels), with no pip configuration file, and lists each wheel's download and
#      unpacked size (checking that torch is the CUDA build by its file name and METADATA);
#      then installs those wheels, offline, into a fresh venv and measures it with du.
#   2. The no-GPU route as this machine serves it: a fresh venv, `pip install -r
#      requirements.txt` with the machine's own pip configuration (which may serve the
#      CPU build of torch), timed, and measured with du; then requirements-dev.txt on top
#      (what `make test` adds).
# Everything it downloads or installs lies in a temporary folder, removed at the end (the
# first part needs several GB of disk for a while). Never run it in CI.
#
# Usage: tools/install_sizes.sh [--skip-cuda] > benchmarks/results/install_sizes.log
#   --skip-cuda  only the second part (no multi-GB download)
# Environment: PYTHON, the Python for the venvs (default: python3).
# Exit codes: 0 when every step worked; 1 when a download or install failed (the log says
# which); 2 on a usage error.
set -euo pipefail

PYTHON=${PYTHON:-python3}
# A Linux x86_64 machine with glibc 2.28 takes every manylinux tag up to 2.28 (the nvidia-*
# wheels use 2.17, 2.18 and 2.27); pip's --platform adds no older tag itself.
PLATFORMS=()
for glibc_minor in $(seq 28 -1 5); do PLATFORMS+=(--platform "manylinux_2_${glibc_minor}_x86_64"); done
PLATFORMS+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64
  --platform linux_x86_64)
readonly PLATFORMS
work=""

err() {
  printf 'install_sizes.sh: %s\n' "$*" >&2
}

# Sizes in bytes, summed over the wheels in $1: "<download> <unpacked>", and one line per
# wheel on stdout before them.
wheel_sizes() {
  "$PYTHON" - "$1" <<'EOF'
import sys
import zipfile
from pathlib import Path

total_download = total_unpacked = 0
for wheel in sorted(Path(sys.argv[1]).glob("*.whl")):
    download = wheel.stat().st_size
    with zipfile.ZipFile(wheel) as archive:
        unpacked = sum(info.file_size for info in archive.infolist())
    total_download += download
    total_unpacked += unpacked
    print(f"  {download / 1e6:9.1f} MB  {unpacked / 1e6:9.1f} MB unpacked  {wheel.name}")
print(f"  {total_download / 1e6:9.1f} MB  {total_unpacked / 1e6:9.1f} MB unpacked  in all "
      f"({len(list(Path(sys.argv[1]).glob('*.whl')))} wheels)")
EOF
}

# The torch wheel's build, from its file name and its METADATA's nvidia-* requirements.
torch_build() {
  "$PYTHON" - "$1" <<'EOF'
import sys
import zipfile
from pathlib import Path

wheel = next(Path(sys.argv[1]).glob("torch-*.whl"))
with zipfile.ZipFile(wheel) as archive:
    metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
    lines = archive.read(metadata).decode().splitlines()
nvidia = [l.split(":", 1)[1].strip() for l in lines if l.startswith("Requires-Dist: nvidia-")]
build = "CPU build (+cpu)" if "+cpu" in wheel.name else ("CUDA build" if nvidia else "no nvidia-* requirements")
print(f"torch wheel: {wheel.name}: {build}; METADATA requires {len(nvidia)} nvidia-* packages")
for requirement in nvidia:
    print(f"  {requirement}")
EOF
}

# A folder's size in MB (10**6 bytes, as the wheel sizes above), as du counts it.
du_mb() {
  du -sb "$1" | awk '{ printf "%.0f", $1 / 1e6 }'
}

cuda_route() {
  local dl=$work/cuda-wheels venv=$work/cuda-venv TIMEFORMAT='%R'
  local seconds
  printf '\n===== 1. make check on Linux x86_64 from PyPI (Python 3.11)\n'
  printf 'pip download --only-binary=:all: --platform manylinux_2_28_x86_64 (and every older manylinux tag)\n'
  printf '  --python-version 3.11 -r requirements.txt\n'
  printf '(no pip configuration file, no find-links: PyPI only)\n'
  seconds=$({ time env PIP_CONFIG_FILE=/dev/null PIP_FIND_LINKS= PIP_CONSTRAINT= "$PYTHON" -m pip download -q \
    --no-cache-dir --only-binary=:all: "${PLATFORMS[@]}" --python-version 3.11 \
    -r requirements.txt -d "$dl" 2>"$work/pip.stderr"; } 2>&1 | tail -n 1) ||
    { err "the PyPI download failed: $(tail -n 3 "$work/pip.stderr")"; return 1; }
  printf 'downloaded in %s s (depends on the network)\n' "$seconds"
  torch_build "$dl"
  printf 'the wheels (download, unpacked):\n'
  wheel_sizes "$dl"
  printf '\nInstalled offline from those wheels into a fresh venv (pip install --no-index):\n'
  "$PYTHON" -m venv "$venv"
  printf 'an empty venv: %s MB\n' "$(du_mb "$venv")"
  seconds=$({ time env PIP_CONFIG_FILE=/dev/null PIP_FIND_LINKS= PIP_CONSTRAINT= "$venv/bin/python" -m pip install \
    -q --no-index --find-links "$dl" -r requirements.txt 2>"$work/pip.stderr"; } 2>&1 | tail -n 1) ||
    { err "the offline install failed: $(tail -n 3 "$work/pip.stderr")"; return 1; }
  printf 'installed in %s s (unpacking and byte-compiling only, no download)\n' "$seconds"
  printf 'the venv: %s MB (du -sb)\n' "$(du_mb "$venv")"
  rm -rf "$dl" "$venv"
}

cpu_route() {
  local venv=$work/cpu-venv dl=$work/cpu-wheels TIMEFORMAT='%R'
  local seconds
  printf '\n===== 2. the no-GPU route, as this machine serves it: pip install -r requirements.txt\n'
  seconds=$({ time "$PYTHON" -m venv "$venv"; } 2>&1 | tail -n 1)
  printf 'python3 -m venv: %s s\n' "$seconds"
  printf "this machine's pip configuration:\n"
  "$venv/bin/python" -m pip config list | sed 's/^/  /'
  seconds=$({ time env PIP_CACHE_DIR="$work/cache" "$venv/bin/python" -m pip install -q --report "$work/report.json" \
    -r requirements.txt 2>"$work/pip.stderr"; } 2>&1 | tail -n 1) ||
    { err "the install failed: $(tail -n 3 "$work/pip.stderr")"; return 1; }
  printf 'then pip install -r requirements.txt (an empty pip cache): %s s; where each came from:\n' "$seconds"
  "$PYTHON" -c '
import json, sys
for item in json.load(open(sys.argv[1]))["install"]:
    meta = item["metadata"]
    print("  " + meta["name"], meta["version"] + ":", item["download_info"]["url"])
' "$work/report.json"
  printf 'the venv: %s MB (du -sb)\n' "$(du_mb "$venv")"
  "$venv/bin/python" -m pip list --format=freeze | sed 's/^/  /'
  printf 'the wheels it installed (download, unpacked), fetched again from the same sources:\n'
  env PIP_CACHE_DIR="$work/cache" "$venv/bin/python" -m pip download -q -r requirements.txt -d "$dl" >&2
  torch_build "$dl"
  wheel_sizes "$dl"
  seconds=$({ time env PIP_CACHE_DIR="$work/cache" "$venv/bin/python" -m pip install -q -r requirements-dev.txt \
    2>"$work/pip.stderr"; } 2>&1 | tail -n 1) || { err "the contributors' install failed: $(tail -n 3 "$work/pip.stderr")"; return 1; }
  printf '\nthen pip install -r requirements-dev.txt (what make test adds): %s s; the venv: %s MB\n' \
    "$seconds" "$(du_mb "$venv")"
  rm -rf "$venv" "$dl"
}

main() {
  local skip_cuda=0 status=0
  case "${1:-}" in
    "") ;;
    --skip-cuda) skip_cuda=1 ;;
    -h | --help) sed -n '/^# Usage:/,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) err "unknown option: $1 (usage: tools/install_sizes.sh [--skip-cuda])"; exit 2 ;;
  esac
  cd "$(dirname "$0")/.."
  work=$(mktemp -d)
  trap '[ -z "$work" ] || rm -rf "$work"' EXIT
  printf 'tree %s\n' "$(git describe --always --dirty 2>/dev/null || echo unknown)"
  if git diff --quiet HEAD -- requirements.txt requirements-dev.txt 2>/dev/null; then
    printf 'requirements.txt and requirements-dev.txt as committed at %s\n' "$(git rev-parse --short HEAD)"
  fi
  printf 'host: %s, %s CPU core(s), %s\n' "$(uname -m)" "$(nproc)" "$("$PYTHON" --version)"
  # set -e does not hold inside a function called under || or if, so each route runs in a subshell
  # of its own with set -e: any failed step stops its route, and the other route still runs.
  local code
  set +e
  if [ "$skip_cuda" -eq 0 ]; then
    (set -e; cuda_route)
    code=$?
    [ "$code" -eq 0 ] || { err "the PyPI route stopped (exit $code)"; status=1; }
  fi
  (set -e; cpu_route)
  code=$?
  [ "$code" -eq 0 ] || { err "the no-GPU route stopped (exit $code)"; status=1; }
  set -e
  return "$status"
}

main "$@"
