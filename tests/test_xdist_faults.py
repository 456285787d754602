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
    pass


def test_dies():
    deep_in_native_code()
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


@pytest.mark.skipif(sys.platform == "win32", reason="a signal's fault, as POSIX delivers it")
def test_a_worker_killed_by_a_fault_is_reported_with_the_frames_it_died_in(tmp_path):
    (tmp_path / "test_dies.py").write_text(DIES)
    done = run_pytest(tmp_path, "-n", "2")
    assert done.returncode == 1, done.stdout + done.stderr
    failures = done.stdout.split("= FAILURES =", 1)[-1]
    assert "crashed while running 'test_dies.py::test_dies'" in failures, done.stdout
    account = failures.split("faulthandler's account", 1)[-1]
    assert "Fatal Python error: Segmentation fault" in account, done.stdout
    current = account.split("Current thread", 1)[-1]
    assert 'test_dies.py", line 6 in deep_in_native_code' in current, done.stdout
    assert "Thread 0x" not in account or account.index("Current thread") < account.index("Thread 0x")
    assert logs_left(tmp_path) == [], "the run left its folder of logs behind"


def test_without_workers_nothing_is_written_and_faulthandler_is_pytests(tmp_path):
    (tmp_path / "test_passes.py").write_text("def test_passes():\n    pass\n")
    done = run_pytest(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert logs_left(tmp_path) == []


def test_the_faulting_thread_comes_first():
    account = ("Fatal Python error: Aborted\n\nThread 0x1 (most recent call first):\n  File \"io.py\", line 1 in read\n"
               "\nCurrent thread 0x2 (most recent call first):\n  File \"op.py\", line 9 in backward\n\n"
               "Extension modules: torch._C (total: 1)")
    reordered = xdist_faults.faulting_thread_first(account)
    assert reordered.splitlines()[0] == "Fatal Python error: Aborted"
    assert reordered.index("Current thread 0x2") < reordered.index("Thread 0x1") < reordered.index("Extension")
    assert xdist_faults.faulting_thread_first("no threads here") == "no threads here"
