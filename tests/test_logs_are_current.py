"""The pages that quote the backward checker quote logs of the checker they ship with.

Each log of the checker begins with tools/stamp.py's lines: the tree, and a hash of the checker's
files. A page (the README, docs/in-the-wild.md, docs/practice.md, docs/tests.md) that names a log
holding the checker's verdicts (check_backward(...) lines, or a stamp) is warned about when that
log's hash is not the current checker's: the verdicts it quotes may no longer be the checker's.
A warning, not a failure, so that a change to the checker can land before its GPU run; pytest's
warnings summary names each stale page and log, and how to bring them up to date.
benchmarks/results/in-the-wild-diary.md is not among the pages: it is the record of earlier runs,
and quotes earlier checkers' logs on purpose (tests/test_in_the_wild.py holds its quotes to the logs).
"""
import re
import sys
import warnings

import pytest
from chapter_scripts import REPO

sys.path.insert(0, str(REPO / "tools"))
import stamp  # noqa: E402

PAGES = ["README.md", "docs/in-the-wild.md", "docs/practice.md", "docs/tests.md"]
RESULTS = REPO / "benchmarks" / "results"


class StaleLog(UserWarning):
    """A page quotes a log made by another version of the backward checker."""


def quoted_logs(page):
    return sorted(set(re.findall(r"([A-Za-z0-9_.-]+\.log)\b", (REPO / page).read_text())))


def checker_hash_in(log_text):
    found = re.search(r"^checker: ([0-9a-f]{12}) \(", log_text, flags=re.M)
    return found.group(1) if found else None


# Logs whose figures the checker's files decide, by name: its verdicts, and the GPU runs of the tests.
CHECKER_LOGS = re.compile(r"checker|in_the_wild|gpu_check|h[12]00_pytest|h[12]00_notebooks")


def holds_checker_verdicts(name, log_text):
    return bool(CHECKER_LOGS.search(name)) or "check_backward(" in log_text or checker_hash_in(log_text) is not None


def stale_logs(page, current):
    """(log, why) for each checker log the page names whose hash is not current."""
    stale = []
    for name in quoted_logs(page):
        path = RESULTS / name
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if not holds_checker_verdicts(name, text):
            continue
        found = checker_hash_in(text)
        if found != current:
            stale.append((name, f"made by checker {found}" if found else "has no checker stamp"))
    return stale


@pytest.mark.parametrize("page", PAGES)
def test_a_page_quotes_logs_of_the_checker_it_ships_with(page):
    current = stamp.checker_hash()
    for name, why in stale_logs(page, current):
        warnings.warn(StaleLog(f"{page} quotes benchmarks/results/{name}, which {why}, not {current} (the checker "
                               f"here): run tools/gpu_check.sh on a GPU (or the tool that made the log) and "
                               f"commit the new log"))


def test_the_stamp_hashes_every_checker_file_and_changes_with_any():
    files = stamp.checker_files()
    names = {p.relative_to(REPO).as_posix() for p in files}
    assert "practice/backward_checker.py" in names and "backward-check/backward_check/runner.py" in names
    assert re.fullmatch(r"[0-9a-f]{12}", stamp.checker_hash())


def test_a_stale_log_is_named(tmp_path, monkeypatch):
    """The rule itself, on a page and logs of its own: a log of another checker is named; a log without
    checker verdicts (a benchmark's) is not."""
    page = tmp_path / "page.md"
    page.write_text("See `old.log`, `fresh.log` and `bench.log`.")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "old.log").write_text("tree: abc\nchecker: 000000000000 (sha256 ...)\n")
    (tmp_path / "results" / "fresh.log").write_text("tree: abc\nchecker: 111111111111 (sha256 ...)\n")
    (tmp_path / "results" / "bench.log").write_text("tree: abc\nGB/s 4000\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "RESULTS", tmp_path / "results")
    assert stale_logs("page.md", "111111111111") == [("old.log", "made by checker 000000000000")]


def test_the_stamp_refuses_an_argument_it_does_not_know(capsys):
    """An unknown argument is refused in one line with exit 2 and nothing on stdout (before, it was ignored and the
    two lines printed, so a typo of --hash began a log with the wrong stamp)."""
    assert stamp.main(["--hsh"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "unknown arguments --hsh" in err and len(err.strip().splitlines()) == 1
    assert stamp.main(["--hash"]) == 0 and capsys.readouterr().out.strip() == stamp.checker_hash()
