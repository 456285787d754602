"""Compile one file's kernels for GPU targets, in every float dtype, on any machine.

The Triton interpreter accepts code that the GPU compiler rejects (the printed
listings' fp16 erf, for one), so the CPU-only test suite compiles the kernels
for real as well: triton.compile needs the target, not the GPU. Run in its own
process by tests/test_compiles_for_gpus.py, because it makes the script
believe a GPU is present, so that it defines compilable kernels rather than
interpreted ones.

Usage: python tests/compile_for_targets.py [--dtypes fp16,bf16,...] SCRIPT.py TARGET [TARGET ...]
  TARGET: sm_75, sm_80, ..., sm_120 (NVIDIA) or gfx90a, gfx942, gfx1100 (AMD)
Prints one line a target: "TARGET: compiled ..." or "TARGET: FAILED ..."; exits 1 if any failed.
"""
import importlib.util
import inspect
import os
import sys

import torch

os.environ.pop("TRITON_INTERPRET", None)
torch.cuda.is_available = lambda: True
torch.cuda.current_device = lambda: 0
torch.cuda.get_device_name = lambda *args: "compile-only target"

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

# Pointer dtype -> the BLOCK the launch helpers choose for it (4 KiB a program).
BLOCK_FOR_DTYPE = {"fp16": 2048, "bf16": 2048, "fp32": 1024, "fp64": 512}
# i64 is what Triton passes once n >= 2**31. The H100/H200 (sm_90), where the scripts
# were verified, gets both; other targets the i32 of every size below 2**31.
FULL_SIZE_TYPES_TARGET = "sm_90"
# Triton 3.3 changed ASTSource: constexprs now sit in the signature, and the values
# are passed as `constexprs`; before, they were left out and passed as `constants`.
NEW_AST_SOURCE = "constexprs" in inspect.signature(ASTSource.__init__).parameters


def gpu_target(name):
    if name.startswith("sm_"):
        return GPUTarget("cuda", int(name[3:]), 32)
    if name.startswith("gfx"):
        return GPUTarget("hip", name, 64)
    raise SystemExit(f"unknown target {name!r}: expected sm_NN or gfxNNN")


def source(kernel, pointer_dtype, size_type, block):
    signature = {p: f"*{pointer_dtype}" for p in kernel.arg_names if p.endswith("_ptr")} | {"n": size_type}
    if NEW_AST_SOURCE:
        return ASTSource(kernel, signature | {"BLOCK": "constexpr"}, constexprs={"BLOCK": block})
    return ASTSource(kernel, signature, constants={"BLOCK": block})


def main(path, target_names, dtypes=tuple(BLOCK_FOR_DTYPE)):
    spec = importlib.util.spec_from_file_location("compiled_script", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    # Every launched kernel (they take pointers); compute_dtype is inlined into them.
    kernels = {name: obj for name, obj in vars(script).items()
               if isinstance(obj, triton.runtime.JITFunction) and any(a.endswith("_ptr") for a in obj.arg_names)}
    assert kernels, f"no kernels found in {path}"
    failed = []
    for target_name in target_names:
        target = gpu_target(target_name)
        size_types = ("i32", "i64") if target_name == FULL_SIZE_TYPES_TARGET else ("i32",)
        try:
            for name, kernel in sorted(kernels.items()):
                for dtype in dtypes:
                    block = BLOCK_FOR_DTYPE[dtype]
                    for size_type in size_types:
                        try:
                            triton.compile(source(kernel, dtype, size_type, block), target=target)
                        except Exception as error:
                            raise RuntimeError(f"{name} with {dtype} pointers and n: {size_type}: "
                                               f"{type(error).__name__}: {error}") from error
        except RuntimeError as error:
            print(f"{target_name}: FAILED {' '.join(str(error).split())}", flush=True)
            failed.append(target_name)
            continue
        print(f"{target_name}: compiled {len(kernels)} kernels ({', '.join(sorted(kernels))}) "
              f"in {', '.join(dtypes)}, n: {'/'.join(size_types)}", flush=True)
    return 1 if failed else 0

if __name__ == "__main__":
    arguments = sys.argv[1:]
    chosen = tuple(BLOCK_FOR_DTYPE)
    if arguments[:1] == ["--dtypes"]:
        chosen, arguments = tuple(arguments[1].split(",")), arguments[2:]
    if len(arguments) < 2 or not set(chosen) <= set(BLOCK_FOR_DTYPE):
        sys.exit(__doc__)
    sys.exit(main(arguments[0], arguments[1:], chosen))
