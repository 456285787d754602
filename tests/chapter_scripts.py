"""The four chapter scripts and the hardened module, loaded as modules, and helpers the tests share.

The scripts' names start with digits, so they are loaded with importlib. Each
test of a chapter claim runs against every script that defines what it needs,
so a change to one script's copy is caught in that script; the hardening tests
run against hardened_ops.py. Importing a script picks the backend (CUDA, or the
Triton interpreter), as running it does.
"""
import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch
import triton

REPO = Path(__file__).resolve().parent.parent
SCRIPT_NAMES = ("01_chained_expression", "02_graph_structure", "03_fan_in", "04_standalone_complete")
# Beyond the chapter: they import their kernels from hardened_ops.py.
EXTRAS_NAMES = ("extras/train_mlp", "extras/triton_op", "extras/autograd_diagram")


def _load_script(name):
    """The script as a module, loaded once per process: a second load of extras/triton_op.py would register its
    operators again, and torch.library would destroy the first registration under the first module's operators."""
    module_name = f"chapter17_{name.replace('/', '_')}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, REPO / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # torch.compile imports a function's module by name
    spec.loader.exec_module(module)
    return module


# Loading a script on a machine without a GPU sets TRITON_INTERPRET=1 in this
# process; the checker's own runs get the environment as the reader had it.
_ENVIRONMENT_BEFORE_LOADING = dict(os.environ)
SCRIPTS = {name: _load_script(name) for name in SCRIPT_NAMES}
DEVICE = SCRIPTS[SCRIPT_NAMES[0]].DEVICE
sys.path.insert(0, str(REPO))  # as the extras and benchmarks import it
import hardened_ops  # noqa: E402
ON_GPU = DEVICE.type == "cuda"



def load_extra(name):
    """An extras/ script as a module, the same module wherever a test asks for it (triton_op registers operators)."""
    return _load_script(f"extras/{name}")


# The installed Triton's (major, minor), for tests whose tolerance or targets depend on it.
TRITON_RELEASE = tuple(int(part) for part in triton.__version__.split(".")[:2])

requires_gpu = pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU (the scripts chose the Triton interpreter)")


def scripts_defining(*names):
    """pytest params: every script module that defines all of `names`, with the script's name as id."""
    return [pytest.param(module, id=script) for script, module in SCRIPTS.items()
            if all(hasattr(module, n) for n in names)]


def script_name(module):
    return module.__name__.removeprefix("chapter17_")


def seeded_randn(*shape, seed, dtype=torch.float32):
    """Drawn on the CPU generator, as the scripts draw their inputs, then moved to the kernels' device."""
    generator = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(*shape, generator=generator, dtype=dtype, device="cpu").to(DEVICE)


def copy_of_repository(destination):
    """The scripts, expected outputs and checker, copied so that a test may break them."""
    destination.mkdir(parents=True, exist_ok=True)
    for name in SCRIPT_NAMES:
        shutil.copy2(REPO / f"{name}.py", destination)
    shutil.copy2(REPO / "check_outputs.sh", destination)
    shutil.copytree(REPO / "expected_output", destination / "expected_output")
    return destination


def checker_environment(**overrides):
    """The environment for running check_outputs.sh with this interpreter."""
    env = dict(_ENVIRONMENT_BEFORE_LOADING)
    env["PYTHON"] = sys.executable
    env.update(overrides)
    return env
