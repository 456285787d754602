"""
The stamp a log of the checker begins with
==========================================

Two lines: the tree the log was made at, and a hash of the backward checker's own files. A page
that quotes the checker's verdicts quotes a log; tests/test_logs_are_current.py warns when that
log's hash is not the hash of the checker the page ships with, so a verdict never outlives the
code that gave it.

    python tools/stamp.py            # the two lines
    python tools/stamp.py --hash     # the hash alone

The tree is `git describe --always --dirty`, or STAMP_TREE where the machine's copy of the
history cannot say (a copy of the working tree sent elsewhere). Exit status: 0, or 2 for an argument
other than --hash (one line, nothing printed to stdout, so no log begins with a wrong stamp).
"""
import hashlib
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHECKER_FILES = ("backward-check/backward_check/*.py", "backward-check/backward_check/checks/*.py",
                 "backward-check/backward_check/plugin/*.py", "backward-check/pytest_backward_check.py",
                 "practice/backward_checker.py")
STAMP_WORDS = ("sha256 of backward-check/backward_check/{,checks/,plugin/}*.py, backward-check/pytest_backward_check.py "
               "and practice/backward_checker.py")


def checker_files(root=REPO):
    return sorted({path for pattern in CHECKER_FILES for path in Path(root).glob(pattern)})


def checker_hash(root=REPO):
    """The first 12 hex digits of sha256 over each checker file's path and bytes, in path order (of the tree at
    root: this one by default)."""
    digest = hashlib.sha256()
    for path in checker_files(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def tree():
    if os.environ.get("STAMP_TREE"):
        return os.environ["STAMP_TREE"]
    described = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"], capture_output=True,
                               text=True).stdout.strip()
    return described or "unknown"


def lines():
    return [f"tree: {tree()}", f"checker: {checker_hash()} ({STAMP_WORDS})"]


def main(argv):
    if argv not in ([], ["--hash"]):
        print(f"stamp.py: error: unknown arguments {' '.join(argv)} (usage: python tools/stamp.py [--hash])",
              file=sys.stderr)
        return 2
    print(checker_hash() if argv else "\n".join(lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
