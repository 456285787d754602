"""
Past 2**31 elements: does a GELU forward kernel reach the end of the tensor?
============================================================================

The printed listings compute offsets as `pid * BLOCK` in int32, which wraps once a
tensor has more than 2**31 elements; hardened_ops.py casts the program id to int64.
This launches a file's forward kernel on 2**31 + 4096 float32 elements (8 GiB of
input and 8 GiB of output) and compares the last 4096 outputs with
torch.nn.functional.gelu. A wrapped offset either reads and writes out of bounds (the
CUDA error is printed) or leaves the tail wrong.

    python benchmarks/large_tensor.py                                            # hardened_ops.py
    python benchmarks/large_tensor.py --script listings/04_standalone_complete.py  # the printed listing

Needs a CUDA GPU with about 17 GiB free. Exit 0 when the tail is right, 1 otherwise.
"""
import argparse
import importlib.util
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
N = 2**31 + 4096


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--script", type=Path, default=REPO / "hardened_ops.py")
    args = parser.parse_args()
    if not args.script.is_file() or args.script.suffix != ".py":
        parser.error(f"--script {args.script}: {'not a .py file' if args.script.is_file() else 'no such file'} (give "
                     f"hardened_ops.py, or one of the four scripts)")
    if not torch.cuda.is_available():
        sys.exit("large_tensor.py needs a CUDA GPU")
    spec = importlib.util.spec_from_file_location("large_tensor_script", args.script)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    x = torch.randn(N, device="cuda", generator=torch.Generator(device="cuda").manual_seed(0))
    print(f"{args.script.name}: gelu_forward_kernel on {N:,} float32 elements ({torch.cuda.get_device_name()})")
    try:
        launch = getattr(script, "launch_forward", None) or script._launch  # hardened_ops.py, or a listing
        out = launch(script.gelu_forward_kernel, x)
        torch.cuda.synchronize()
        tail = slice(N - 4096, N)
        right = torch.allclose(out[tail], torch.nn.functional.gelu(x[tail]), atol=1e-5)
    except Exception as error:  # the failure is the result being shown
        print(f"failed: {type(error).__name__}: {' '.join(str(error).split())[:200]}")
        return 1
    print(f"last 4096 outputs allclose to torch.nn.functional.gelu? {right}")
    return 0 if right else 1


if __name__ == "__main__":
    sys.exit(main())
