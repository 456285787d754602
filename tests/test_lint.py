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


PACKAGE = REPO / "backward-check" / "backward_check"
SOURCES = [p for p in sorted(PACKAGE.rglob("*.py")) if "tests" not in p.relative_to(PACKAGE).parts]


def test_no_line_of_the_package_continues_with_a_backslash():
    """Parentheses, not backslashes, carry a statement over lines (PEP 8); a string's own escape is not one."""
    continued = [f"{p.relative_to(REPO)}:{n}" for p in SOURCES
                 for n, line in enumerate(p.read_text().splitlines(), 1)
                 if line.endswith("\\") and not line.rstrip("\\").endswith('"""')]
    assert SOURCES and not continued, continued


def test_every_check_words_its_findings_in_one_place():
    """A check's finding is built by Context.finding (the input it is about, the evidence, the grown shapes, what
    follows), never by hand: the runner alone words a crash before there is a context to word it."""
    by_hand = [f"{p.relative_to(REPO)}:{n}" for p in SOURCES if p.name not in ("context.py", "runner.py", "report.py")
               for n, line in enumerate(p.read_text().splitlines(), 1)
               if "Finding(" in line and "isinstance" not in line and "class Finding" not in line]
    assert not by_hand, by_hand
