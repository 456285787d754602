"""Which backend the compile checks use: check_backward's compile= (True, a backend's name, a callable), the pytest
plugin's --backward-check-compile[=BACKEND], and a tool's BACKWARD_CHECK_COMPILE, made one backend torch.compile
takes. The plugin, the worker and check_backward choose here; the checks themselves are compiled.py's."""
import os
import shutil

import torch

from .backend import SPELLINGS_OF_ON
from .calling import UsageError

ENVIRONMENT = "BACKWARD_CHECK_COMPILE"  # how a tool's processes are told to check under torch.compile


def cpp_compiler():
    """The C++ compiler Inductor would call to compile code for the CPU ($CXX, else c++, g++ or clang++), or None."""
    wanted = [os.environ["CXX"]] if os.environ.get("CXX") else ["c++", "g++", "clang++"]
    return next(filter(None, map(shutil.which, wanted)), None)


def inductor_can_run_on(device):
    """Whether Inductor can generate code for device: Triton for a GPU, a C++ compiler for the CPU."""
    if device.type == "cpu":
        return cpp_compiler() is not None
    try:
        from torch.utils._triton import has_triton
    except ImportError:  # pragma: no cover  (older torch)
        return False
    return has_triton()


def default_backend(device):
    """inductor where it can generate code for the op's device, else aot_eager (AOTAutograd's graphs, run eagerly:
    the tracing that changes a gradient, without generated code)."""
    return "inductor" if inductor_can_run_on(device) else "aot_eager"


def backend_for(compile, device):
    """check_backward's compile= as a backend torch.compile takes (None where the check is off): True picks
    default_backend(device); a name must be one of torch._dynamo.list_backends(); a callable is a backend itself."""
    if compile is None or compile is False:
        return None
    if compile is True:
        return default_backend(device)
    if isinstance(compile, str):
        known = torch._dynamo.list_backends(exclude_tags=())
        if compile not in known:
            raise UsageError(f"compile={compile!r} names no backend torch.compile knows: pass True (inductor where a "
                             f"compiler exists, else aot_eager), one of {sorted(known)}, or a backend callable")
        return compile
    if callable(compile):
        return compile
    raise UsageError(f"compile= takes True, False, a backend's name or a backend callable, not "
                     f"{type(compile).__name__}")


def backend_from_text(value):
    """compile= as a command line writes it (the pytest plugin's --backward-check-compile[=BACKEND], or
    ENVIRONMENT): False where empty or off, True for the default backend, else a backend's name."""
    value = (value or "").strip()
    if value.lower() in ("", "0", "false", "no", "off"):
        return False
    return True if value.lower() in SPELLINGS_OF_ON + ("default",) else value


def backend_from_environment():
    """compile= as a tool hands it to the processes it starts, in ENVIRONMENT (research/in_the_wild.py --compile)."""
    return backend_from_text(os.environ.get(ENVIRONMENT))


def backend_name(backend):
    return backend if isinstance(backend, str) else getattr(backend, "__name__", type(backend).__name__)
