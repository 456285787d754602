"""
What the printed listing gets wrong, and what hardened_ops.py does instead
==========================================================================

Runs the book's TritonGELU (listings/04_standalone_complete.py, exactly as printed) and
hardened_ops.py's on inputs the chapter never gives it, each with a random grad_output,
and prints one row a case: what each one did, against PyTorch's own GELU.

    python tools/listing_failures.py            # the cases this machine can run
    python tools/listing_failures.py --large    # also 2**31 + 4096 elements (GPU, about 40 GiB)

On the CPU it runs in Triton's interpreter; cases that need a GPU (or two) say so.
Exit status: 0 when hardened_ops.py is right or refuses clearly in every case run, else 1.
"""
import argparse
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
import hardened_ops  # noqa: E402  (picks the backend before triton is imported)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

DEVICE = hardened_ops.DEVICE
ON_GPU = DEVICE.type == "cuda"


def load_listing():
    spec = importlib.util.spec_from_file_location("printed_listing", REPO / "listings/04_standalone_complete.py")
    listing = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(listing)
    return listing


def seeded(*shape, seed, dtype=torch.float32, device=DEVICE):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype).to(device)


def first_order(function, x, grad_output):
    """(forward, x.grad) of function on x, as it is (a view keeps its strides), under a random grad_output."""
    x = x.detach().requires_grad_(True)
    y = function(x)
    y.backward(grad_output)
    return y.detach(), x.grad


def gradient_penalty(function, x, grad_output):
    """x.grad of (y * grad_output).sum() + |dy/dx . grad_output|^2: a double backward."""
    x = x.detach().clone().requires_grad_(True)
    y = function(x)
    g, = torch.autograd.grad(y, x, grad_output, create_graph=True)
    loss = (y * grad_output).sum() + (g ** 2).sum()
    loss.backward()
    return x.grad


def verdict(run, reference):
    """'right', 'WRONG ...' or 'error: ...' for one run against its reference."""
    try:
        got = run()
        if ON_GPU:
            torch.cuda.synchronize()
    except Exception as error:  # the failure is the result being shown
        return "error: " + f"{type(error).__name__}: {' '.join(str(error).split())}"[:150]
    expected = reference()
    got, expected = (got if isinstance(got, tuple) else (got,)), (expected if isinstance(expected, tuple) else (expected,))
    worst = max((a.double() - b.double()).abs().max().item() if a.numel() else 0.0 for a, b in zip(got, expected))
    tolerance = 2e-2 if got[0].dtype in (torch.float16, torch.bfloat16) else 1e-4
    return "right" if worst <= tolerance * max(1.0, max(b.abs().max().item() for b in expected if b.numel())) \
        else f"WRONG: largest error {worst:.3g}, no error raised"


def cases(large):
    base = seeded(6, 12, seed=1)
    yield "transposed input x.t() (6 x 12 -> 12 x 6)", base.t(), seeded(12, 6, seed=2), None
    yield "strided slice x[:, ::3]", base[:, ::3], seeded(6, 4, seed=3), None
    yield "bfloat16 input", seeded(1031, seed=4, dtype=torch.bfloat16), seeded(1031, seed=5, dtype=torch.bfloat16), None
    yield "float16 input", seeded(1031, seed=4, dtype=torch.float16), seeded(1031, seed=5, dtype=torch.float16), None
    yield "int64 input", torch.arange(-3, 4).to(DEVICE), None, None
    if ON_GPU:
        yield "a CPU tensor on a GPU run", seeded(8, seed=6, device="cpu"), seeded(8, seed=7, device="cpu"), None
    if torch.cuda.device_count() >= 2:
        yield "a tensor on cuda:1 while cuda:0 is current", seeded(4099, seed=8).to("cuda:1"), \
            seeded(4099, seed=9).to("cuda:1"), None
    else:
        yield "a tensor on cuda:1 while cuda:0 is current", None, None, "needs two GPUs"
    yield "double backward (a gradient penalty, create_graph=True)", seeded(1031, seed=10), seeded(1031, seed=11), \
        "double"
    if large and ON_GPU:
        yield "2**31 + 4096 float32 elements (forward, last 4096)", None, None, "large"
    else:
        yield "2**31 + 4096 float32 elements (forward, last 4096)", None, None, \
            "needs a GPU and --large" if not ON_GPU else "needs --large"


def large_case(script):
    """Run in a child process: an illegal memory access leaves the CUDA context unusable."""
    result = subprocess.run([sys.executable, str(REPO / "benchmarks/large_tensor.py"), "--script", str(script)],
                            capture_output=True, text=True)
    lines = (result.stdout + result.stderr).strip().splitlines()
    last = lines[-1] if lines else f"exit status {result.returncode}"
    if result.returncode == 0:
        return "right"
    return ("error: " + last.removeprefix("failed: "))[:150] if "failed" in last else f"WRONG: {last}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--large", action="store_true", help="also 2**31 + 4096 elements (a GPU with ~40 GiB free)")
    args = parser.parse_args(argv)
    listing = load_listing()
    print(hardened_ops.BACKEND)
    print(f"torch {torch.__version__}, triton {__import__('triton').__version__}")
    versions = {"printed listing": listing.TritonGELU, "hardened_ops": hardened_ops.TritonGELU}
    hardened_ok = True
    for name, x, grad_output, special in cases(args.large):
        print(f"\n{name}")
        for label, function in versions.items():
            if special not in (None, "double", "large"):
                outcome = f"not run: {special}"
            elif special == "large":
                outcome = large_case(REPO / ("listings/04_standalone_complete.py" if label == "printed listing"
                                             else "hardened_ops.py"))
            elif special == "double":
                outcome = verdict(lambda: gradient_penalty(function.apply, x, grad_output),
                                  lambda: gradient_penalty(lambda t: F.gelu(t, approximate="none"), x, grad_output))
            elif grad_output is None:
                outcome = verdict(lambda: function.apply(x.clone()), lambda: F.gelu(x.double()))
            else:
                outcome = verdict(lambda: first_order(function.apply, x, grad_output),
                                  lambda: first_order(lambda t: F.gelu(t.double()), x.double(), grad_output.double()))
            print(f"  {label:<16} {outcome}")
            if label == "hardened_ops" and outcome.startswith("WRONG"):
                hardened_ok = False
    return 0 if hardened_ok else 1


def leave(status):
    """sys.exit(status), without tearing the interpreter down: autograd's device threads, which ran the Python
    backwards called here, can abort the process during that teardown (pytorch/pytorch#38228; seen on an H100:
    "terminate called without an active exception", exit -6, after every row was printed)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    leave(main())
