import sys
from pathlib import Path

import pytest

# The tests import their shared helpers (tests/chapter_scripts.py) by name.
sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_sessionstart(session):
    """Stop at once, naming the fix, where every number would be garbage (check_outputs.sh refuses it too)."""
    import importlib.metadata
    import os

    import torch

    def release(package):
        return tuple(int(p) for p in importlib.metadata.version(package).split(".")[:2])

    interpreted = os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available()
    if interpreted and release("triton") < (3, 2) and release("numpy") >= (2, 0):
        pytest.exit(f"Triton {importlib.metadata.version('triton')}'s interpreter stores nothing under NumPy "
                    f"{importlib.metadata.version('numpy')}, so every result would be uninitialised memory. "
                    f"Fix: {sys.executable} -m pip install \"numpy<2\", or use torch 2.6 or newer (Triton 3.2+).",
                    returncode=2)
