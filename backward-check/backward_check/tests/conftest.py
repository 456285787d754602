import os

# The plugin's table fits the terminal: the suites these tests run (in a subprocess, which inherits this, or in
# this process through pytester) print it in its wide layout, one line a row, which the tests read; the tests of
# narrower tables set their own width.
os.environ["COLUMNS"] = "1000"

# pytester's in-process runs (test_plugin.py) put sys.modules back as they found it. A module first imported
# inside one would be dropped after it and imported again later as a second module object: the package's worker
# module would then no longer be the one its Worker pickles `serve` from, and a torch module (Dynamo, which the
# compile check imports, brings torch.distributed's functional collectives) would register its operators twice,
# which raises. Imported here, before any run, they stay.
import importlib
import pkgutil

import pytest

import backward_check
import torch._dynamo  # noqa: F401

for _module in pkgutil.walk_packages(backward_check.__path__, "backward_check."):
    if not _module.name.startswith("backward_check.tests"):
        importlib.import_module(_module.name)


@pytest.fixture(autouse=True)
def _gpu_memory_handed_back():
    """Each test's cached GPU memory handed back after it: pytest-xdist's workers share one card, and a worker's
    caching allocator otherwise keeps its largest test's memory for the rest of the session (sixteen workers' peaks
    filled an 80 GB H100, and checks of tiny ops met "CUDA error: out of memory")."""
    yield
    import torch
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
