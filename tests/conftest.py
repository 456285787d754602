import os
import sys
from pathlib import Path

import pytest

# The plugin's table fits the terminal: the suites these tests run (in process, or in a subprocess, which inherits
# this) print it in its wide layout, one line a row, which the tests read; tests of narrower tables set their own.
os.environ["COLUMNS"] = "1000"

# The tests import their shared helpers (tests/chapter_scripts.py) by name, and the checker's package
# (backward-check/backward_check) from its folder, as the book's practice/ scripts do.
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "backward-check"))

# A pytest-xdist worker killed by a fault: its report quotes faulthandler's account (tests/xdist_faults.py).
from xdist_faults import (pytest_configure, pytest_handlecrashitem, pytest_runtest_call,  # noqa: E402, F401
                          pytest_runtest_setup, pytest_runtest_teardown, pytest_unconfigure)


def pytest_sessionstart(session):
    """Stop at once, naming the fix, where every number would be garbage (check_outputs.sh refuses it too)."""
    import os

    import numpy
    import torch
    import triton

    # The modules' own versions: the distribution is "triton" on Linux but "triton-windows" on
    # Windows, so importlib.metadata.version("triton") is not found there.
    def release(module):
        return tuple(int(p) for p in module.__version__.split(".")[:2])

    interpret_on = os.environ.get("TRITON_INTERPRET", "").lower() in ("1", "true", "yes", "y", "on")
    interpreted = interpret_on or not torch.cuda.is_available()
    if interpreted and release(triton) < (3, 2) and release(numpy) >= (2, 0):
        pytest.exit(f"Triton {triton.__version__}'s interpreter stores nothing under NumPy {numpy.__version__}, "
                    f"so every result would be uninitialised memory. "
                    f"Fix: {sys.executable} -m pip install \"numpy<2\", or use torch 2.6 or newer (Triton 3.2+).",
                    returncode=2)

# Each test's cached GPU memory handed back after it (backward_check/tests/gpu_memory.py says why).
from backward_check.tests.gpu_memory import gpu_memory_handed_back  # noqa: E402, F401  (autouse)
