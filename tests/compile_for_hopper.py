"""Compile one script's kernels for an H100/H200 (sm_90) in every float dtype, on any machine.

The Triton interpreter accepts code that the GPU compiler rejects (the printed
listings' fp16 erf, for one), so the CPU-only test suite compiles the kernels
for real as well: triton.compile needs the target, not the GPU. Run in its own
process by tests/test_compiles_for_hopper.py, because it makes the script
believe a GPU is present, so that it defines compilable kernels rather than
interpreted ones.

Usage: python tests/compile_for_hopper.py SCRIPT.py
"""
import importlib.util
import os
import sys

import torch

os.environ.pop("TRITON_INTERPRET", None)
torch.cuda.is_available = lambda: True
torch.cuda.current_device = lambda: 0
torch.cuda.get_device_name = lambda *args: "sm_90 compile-only target"

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

HOPPER = GPUTarget("cuda", 90, 32)
# Pointer dtype -> the BLOCK the launch helpers choose for it (4 KiB a program).
BLOCK_FOR_DTYPE = {"fp16": 2048, "bf16": 2048, "fp32": 1024, "fp64": 512}
SIZE_TYPES = ("i32", "i64")  # i64: what Triton passes once n >= 2**31


def main(path):
    spec = importlib.util.spec_from_file_location("compiled_script", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    kernels = {name: obj for name, obj in vars(script).items()
               if isinstance(obj, triton.runtime.JITFunction) and name.endswith("_kernel")}
    assert kernels, f"no kernels found in {path}"
    for name, kernel in sorted(kernels.items()):
        pointers = [p for p in kernel.arg_names if p.endswith("_ptr")]
        for dtype, block in BLOCK_FOR_DTYPE.items():
            for size_type in SIZE_TYPES:
                signature = {p: f"*{dtype}" for p in pointers} | {"n": size_type, "BLOCK": "constexpr"}
                source = ASTSource(kernel, signature, constexprs={"BLOCK": block})
                try:
                    triton.compile(source, target=HOPPER)
                except Exception as error:
                    sys.exit(f"{name} does not compile for sm_90 with {dtype} pointers and n: {size_type}:\n{error}")
        print(f"{name}: compiled for sm_90 in {', '.join(BLOCK_FOR_DTYPE)}")


if __name__ == "__main__":
    main(sys.argv[1])
