"""The checker's package is lint-clean: ruff, configured in backward-check/pyproject.toml (pyflakes, pycodestyle,
bugbear, blind excepts, and no noqa that silences nothing). requirements-dev.txt pins ruff, so `make test` and CI
run this; an interpreter without ruff (the GPU machine's) skips it."""
import importlib.util
import subprocess
import sys

import pytest
from chapter_scripts import REPO


@pytest.mark.skipif(importlib.util.find_spec("ruff") is None, reason="ruff is not installed (requirements-dev.txt)")
def test_the_package_is_ruff_clean():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "backward-check"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
