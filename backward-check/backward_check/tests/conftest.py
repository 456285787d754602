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

import backward_check
import torch._dynamo  # noqa: F401

for _module in pkgutil.walk_packages(backward_check.__path__, "backward_check."):
    if not _module.name.startswith("backward_check.tests"):
        importlib.import_module(_module.name)

# Each test's cached GPU memory handed back after it (backward_check/tests/gpu_memory.py says why).
from backward_check.tests.gpu_memory import gpu_memory_handed_back  # noqa: E402, F401  (autouse)
