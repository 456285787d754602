"""
What a call costs, the engine's handoff: one engine thread against the device thread
====================================================================================

One of the modes of benchmarks/call_cost.py, in a process of its own. The autograd engine runs
a CUDA backward on a thread of its own, the device thread: the calling thread hands the graph
over, and sleeps until it is done. torch.autograd.set_multithreading_enabled(False) makes the
calling thread run the backward itself: no handoff. Each group, at each size (--log2, fp32),
times one forward and backward (torch.autograd.grad) both ways, switching between loops:

  F.gelu, device thread (the reference), and again (the A/A copy); F.gelu, one thread
  TritonGELU, ordinary launch and lean launch, each on the device thread and on one thread

Then the same loop with no GPU work at all, on the CPU (2**10 elements, PyTorch's CPU kernels):
F.gelu, and a Python autograd.Function whose forward and backward call the same CPU kernels,
each with the engine's threads switched on and off. A CPU backward always runs on the calling
thread, so there the switch should change nothing, and the Function's extra time is the host's
own cost of a Python Function: no launch, no handoff.

The gap between TritonGELU and F.gelu on one thread is the Python of the op (its Function, its
checks, its launches); what the device thread adds to that gap is the handoff.

    python benchmarks/call_cost_handoff.py --rows handoff.csv     # on a CUDA GPU
    python benchmarks/call_cost_handoff.py --dry-run              # anywhere, tiny sizes
"""
import contextlib
import sys

from call_cost_eager import forward_backward  # benchmarks/, beside this file
from call_cost_timing import AA_SUFFIX, Rung, run_mode


def engine_threads(torch, on, lean=None, ops=None):
    """A context for a loop: the engine's device threads on or off, and the launch path, restored after."""
    @contextlib.contextmanager
    def context():
        torch.autograd.set_multithreading_enabled(on)
        try:
            with (ops.launch_path(lean=lean) if ops is not None else contextlib.nullcontext()):
                yield
        finally:
            torch.autograd.set_multithreading_enabled(True)
    return context


def python_gelu(torch):
    """GELU as a Python autograd.Function around PyTorch's own kernels: the Function's cost alone."""
    class PythonGELU(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.ops.aten.gelu(x)

        @staticmethod
        def backward(ctx, grad_output):
            x, = ctx.saved_tensors
            return torch.ops.aten.gelu_backward(grad_output, x)
    return PythonGELU


def build(ops, torch, args):
    import torch.nn.functional as F
    for n in args.sizes:
        generator = torch.Generator().manual_seed(n)
        x = torch.randn(n, generator=generator).to(ops.DEVICE)
        g = torch.randn(n, generator=generator).to(ops.DEVICE)
        group = f"forward + backward, 2**{n.bit_length() - 1}"
        rungs = [Rung(group, "F.gelu", forward_backward(F.gelu, x, g), engine="device thread", n=n,
                      context=engine_threads(torch, True)),
                 Rung(group, "F.gelu" + AA_SUFFIX, forward_backward(F.gelu, x, g), engine="device thread", n=n,
                      context=engine_threads(torch, True)),
                 Rung(group, "F.gelu", forward_backward(F.gelu, x, g), engine="one thread", n=n,
                      context=engine_threads(torch, False))]
        for launch in ("ordinary", "lean"):
            for on in (True, False):
                rungs.append(Rung(group, "TritonGELU", forward_backward(ops.TritonGELU.apply, x, g), launch=launch,
                                  engine="device thread" if on else "one thread", n=n,
                                  context=engine_threads(torch, on, launch == "lean", ops)))
        yield rungs

    n = 16 if args.dry_run else 2**10
    generator = torch.Generator().manual_seed(n)
    x, g = torch.randn(n, generator=generator), torch.randn(n, generator=generator)
    group = f"no GPU work: on the CPU, 2**{n.bit_length() - 1}"
    gelu = python_gelu(torch)
    yield [Rung(group, "F.gelu (CPU)", forward_backward(F.gelu, x, g), engine="threads on", n=n,
                context=engine_threads(torch, True)),
           Rung(group, "F.gelu (CPU)" + AA_SUFFIX, forward_backward(F.gelu, x, g), engine="threads on", n=n,
                context=engine_threads(torch, True)),
           Rung(group, "F.gelu (CPU)", forward_backward(F.gelu, x, g), engine="threads off", n=n,
                context=engine_threads(torch, False)),
           Rung(group, "a Python Function around the same CPU kernels", forward_backward(gelu.apply, x, g),
                engine="threads on", n=n, context=engine_threads(torch, True)),
           Rung(group, "a Python Function around the same CPU kernels", forward_backward(gelu.apply, x, g),
                engine="threads off", n=n, context=engine_threads(torch, False))]


if __name__ == "__main__":
    sys.exit(run_mode("handoff", __doc__.split("\n\n")[0], build))
