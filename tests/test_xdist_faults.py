"""tests/xdist_faults.py: a pytest-xdist worker killed by a fault is reported with faulthandler's account of where,
the faulting thread's stack first; without -n nothing changes, and no log outlives the run."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import xdist_faults

TESTS = Path(__file__).resolve().parent

DIES = '''
import os, signal


def deep_in_native_code():
    os.kill(os.getpid(), signal.SIGSEGV)  # as a fault in a C extension is delivered


def test_passes():
    print("folder variable:", os.environ.get("CHAPTER17_TEST_FAULT_LOGS"))


def test_dies():
    deep_in_native_code()
'''

# A pytest run inside a test (pytester's) ends by pointing faulthandler back at stderr: a fault in a later test of
# the same worker must still reach the worker's log.
PYTEST_INSIDE_FIRST = '''
def test_runs_pytest_inside(pytester):
    pytester.makepyfile("def test_ok():\\n    pass\\n")
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
'''


def run_pytest(folder, *args):
    """pytest with this plugin, in folder, with an environment of its own (not this run's worker's or folder)."""
    environment = {k: v for k, v in os.environ.items()
                   if k not in (xdist_faults.FOLDER_VARIABLE, "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT")}
    environment.update(PYTHONPATH=str(TESTS), TMPDIR=str(folder / "tmp"))
    (folder / "tmp").mkdir()
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "xdist_faults", "-p", "no:cacheprovider",
                           *args], cwd=folder, env=environment, capture_output=True, text=True,
                          timeout=120)


def logs_left(folder):
    return list((folder / "tmp").glob("chapter17-test-faults-*"))


def account_of_the_crash(done):
    """The crash's report in the FAILURES section, from faulthandler's account on; asserts both are there."""
    failures = done.stdout.split("= FAILURES =", 1)[-1]
    assert "crashed while running 'test_dies.py::test_dies'" in failures, done.stdout + done.stderr
    assert "faulthandler's account" in failures, done.stdout + done.stderr
    return failures.split("faulthandler's account", 1)[1]


@pytest.mark.skipif(sys.platform == "win32", reason="a signal's fault, as POSIX delivers it")
def test_a_worker_killed_by_a_fault_is_reported_with_the_frames_it_died_in(tmp_path):
    (tmp_path / "test_dies.py").write_text(DIES)
    done = run_pytest(tmp_path, "-n", "2")
    assert done.returncode == 1, done.stdout + done.stderr
    account = account_of_the_crash(done)
    assert "Fatal Python error: Segmentation fault" in account, done.stdout
    current = account.split("Current thread", 1)[-1]
    assert 'test_dies.py", line 6 in deep_in_native_code' in current, done.stdout
    assert "Thread 0x" not in account or account.index("Current thread") < account.index("Thread 0x")
    assert logs_left(tmp_path) == [], "the run left its folder of logs behind"


@pytest.mark.skipif(sys.platform == "win32", reason="a signal's fault, as POSIX delivers it")
def test_a_fault_after_a_pytest_run_inside_a_test_is_still_reported(tmp_path):
    (tmp_path / "test_a_inside.py").write_text(PYTEST_INSIDE_FIRST)
    (tmp_path / "test_dies.py").write_text(DIES)
    done = run_pytest(tmp_path, "-p", "pytester", "-n", "1")  # one worker: the pytester test runs first
    assert done.returncode == 1, done.stdout + done.stderr
    assert 'test_dies.py", line 6 in deep_in_native_code' in account_of_the_crash(done), done.stdout


@pytest.mark.skipif(sys.platform == "win32", reason="a signal's fault, as POSIX delivers it")
def test_without_workers_faulthandler_is_pytests_and_nothing_is_written(tmp_path):
    (tmp_path / "test_dies.py").write_text(DIES)
    done = run_pytest(tmp_path, "-s")
    assert done.returncode != 0, done.stdout + done.stderr
    assert "folder variable: None" in done.stdout, done.stdout
    assert "Fatal Python error: Segmentation fault" in done.stderr, done.stderr
    assert 'test_dies.py", line 6 in deep_in_native_code' in done.stderr, done.stderr
    assert logs_left(tmp_path) == []


def test_the_faulting_thread_comes_first():
    account = ("Fatal Python error: Aborted\n\nThread 0x1 (most recent call first):\n  File \"io.py\", line 1 in read\n"
               "\nCurrent thread 0x2 (most recent call first):\n  File \"op.py\", line 9 in backward\n\n"
               "Extension modules: torch._C (total: 1)")
    reordered = xdist_faults.faulting_thread_first(account)
    assert reordered.splitlines()[0] == "Fatal Python error: Aborted"
    assert reordered.index("Current thread 0x2") < reordered.index("Thread 0x1") < reordered.index("Extension")
    assert xdist_faults.faulting_thread_first("no threads here") == "no threads here"
