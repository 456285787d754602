"""docs/practice.md's list of checks and table of traps are the checker's own (tools/checker_docs.py makes them
from backward_check.runner.CHECKS and report.ALL_TRAPS), and every trap a check may name is one the table has."""
import sys

from chapter_scripts import REPO

sys.path.insert(0, str(REPO / "tools"))
import checker_docs  # noqa: E402


def test_the_pages_checks_and_traps_are_generated_from_the_checker():
    page = checker_docs.PAGE.read_text()
    assert checker_docs.page_with(page, checker_docs.markdown()) == page, (
        "docs/practice.md's checks or traps differ from the checker's: run python tools/checker_docs.py --write")


def test_every_check_names_known_traps_and_every_trap_a_check():
    from backward_check.report import ALL_TRAPS, CRASHES
    from backward_check.runner import CHECKS
    named = {t for c in CHECKS for t in c.traps}
    assert named <= set(ALL_TRAPS)
    assert set(ALL_TRAPS) - named <= {CRASHES}, "a trap no check can report"
    assert len({c.name for c in CHECKS}) == len(CHECKS)


def test_a_mistyped_write_is_refused_not_ignored():
    """`checker_docs.py --wirte` printed the block and wrote nothing, exit 0: now exit 2 with its usage."""
    import subprocess
    done = subprocess.run([sys.executable, str(REPO / "tools" / "checker_docs.py"), "--wirte"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.startswith("usage:") and done.stdout == "", done.stderr
