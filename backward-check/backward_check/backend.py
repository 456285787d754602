"""Where the kernels run: the GPU PyTorch sees, or else Triton's interpreter on the CPU.

The package chooses for itself, so it installs and runs on its own (pip install ./backward-check),
without the book's scripts. Triton reads TRITON_INTERPRET once, when it is first imported: if the
caller's code imported triton before this package could switch the interpreter on, the choice
comes too late, and a "0 active drivers" error (or "Cannot call @triton.jit'd outside of the scope
of a kernel") is that, not the op's fault: the checker then stops with that advice instead of
reporting a crash. hardened_ops.py makes the same choice for the chapter's op."""
import os
import sys

import torch

TRITON_IMPORTED_FIRST = "triton" in sys.modules
SPELLINGS_OF_ON = ("1", "true", "yes", "y", "on")  # what Triton 3.7 reads as on; older ones read only "1"
INTERPRETER_ASKED = os.environ.get("TRITON_INTERPRET", "").lower() in SPELLINGS_OF_ON


def choose_backend():
    """(device, a sentence saying where the kernels run), switching the interpreter on where no GPU is."""
    asked = INTERPRETER_ASKED
    if not asked and torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
        vendor = "ROCm" if torch.version.hip else "CUDA"
        return device, f"running on {torch.cuda.get_device_name(device)} ({vendor})"
    os.environ["TRITON_INTERPRET"] = "1"
    why = "TRITON_INTERPRET=1" if asked else "no CUDA GPU visible"
    return torch.device("cpu"), f"{why}: running on the CPU through the Triton interpreter"


DEVICE, BACKEND = choose_backend()
# triton was imported before anyone asked for its interpreter, on a machine without a GPU: it found neither
TOO_LATE = TRITON_IMPORTED_FIRST and not INTERPRETER_ASKED and DEVICE.type == "cpu"
