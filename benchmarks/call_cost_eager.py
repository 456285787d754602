"""
What a call costs, eager: from a bare Triton launch to a registered op, and the MLP step
=======================================================================================

One of the modes of benchmarks/call_cost.py, in a process of its own (nothing is compiled or
captured here, so nothing can move these figures). At each size (--log2, fp32), two groups:

  forward             F.gelu (the reference), F.gelu again (the A/A copy), a bare
                      kernel[grid](...) launch, the launch helper (checks, empty_like, the
                      launch), TritonGELU.apply and gelu() under torch.no_grad()
  forward + backward  F.gelu through torch.autograd.grad (the reference), its A/A copy,
                      TritonGELU, the book's TritonGELU (04, recording its calls), extras/
                      triton_op.py's registered op, define/impl ops inside a Function

each hardened rung with the ordinary kernel[grid](...) launch and with the lean launch. Then
the MLP step of extras/train_mlp.py's block (64 x 256, LayerNorm, Linear, GELU, Linear):
zero_grad, forward, MSE loss, backward; nn.GELU (the reference, and its A/A copy) against
TritonGELU. On a GPU each rung also gets triton.testing.do_bench's median, which flushes the
L2 cache before every call and so hides the CPU's time.

    python benchmarks/call_cost_eager.py --rows eager.csv     # on a CUDA GPU
    python benchmarks/call_cost_eager.py --dry-run            # anywhere, tiny sizes
"""
import importlib.util
import sys

from call_cost_timing import AA_SUFFIX, REPO, Rung, run_mode  # benchmarks/call_cost_timing.py, beside this file


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # torch.compile and torch.library look a module up by name
    spec.loader.exec_module(module)
    return module


def forward_backward(op, x, g):
    """One forward and backward of op at x under g, as torch.autograd.grad runs it."""
    import torch

    def call():
        leaf = x.detach().requires_grad_(True)
        torch.autograd.grad(op(leaf), leaf, g)
    return call


def no_grad(op, x):
    import torch

    def call():
        with torch.no_grad():
            op(x)
    return call


def define_impl_op(ops, torch):
    """GELU as torch.library define/impl ops (no Python autograd registration), with a plain
    autograd.Function outside calling them: the low-level form, without custom_op's wrappers."""
    library = torch.library.Library("chapter17_call_cost", "DEF")
    library.define("gelu(Tensor x) -> Tensor")
    library.define("gelu_backward(Tensor grad_output, Tensor x) -> Tensor")
    backend = "CUDA" if ops.DEVICE.type == "cuda" else "CPU"
    library.impl("gelu", lambda x: ops.launch_forward(ops.gelu_forward_kernel, x), backend)
    library.impl("gelu_backward", lambda g, x: ops.launch_backward(ops.gelu_backward_kernel, g, x), backend)
    forward, backward = torch.ops.chapter17_call_cost.gelu.default, torch.ops.chapter17_call_cost.gelu_backward.default

    class DefineImplGELU(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return forward(x)

        @staticmethod
        def backward(ctx, grad_output):
            x, = ctx.saved_tensors
            return backward(grad_output, x)

    return library, DefineImplGELU  # the library must stay alive while the ops are used


def mlp_step(block, batch, target):
    """zero_grad, forward, MSE loss, backward: a training step without the optimizer."""
    import torch

    def call():
        block.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(block(batch), target).backward()
    return call


def build(ops, torch, args):
    import torch.nn.functional as F
    import triton
    book = load("call_cost_book", REPO / "04_standalone_complete.py")
    train_mlp = load("call_cost_train_mlp", REPO / "extras" / "train_mlp.py")
    triton_op = load("call_cost_triton_op", REPO / "extras" / "triton_op.py") \
        if hasattr(torch.library, "triton_op") else None
    library, define_impl = define_impl_op(ops, torch)

    def lean(on):
        return lambda: ops.launch_path(lean=on)

    for n in args.sizes:
        generator = torch.Generator().manual_seed(n)
        x = torch.randn(n, generator=generator).to(ops.DEVICE)
        g = torch.randn(n, generator=generator).to(ops.DEVICE)
        out = torch.empty_like(x)
        block = ops.block_for(x)
        grid = (triton.cdiv(n, block),)
        group = f"forward, 2**{n.bit_length() - 1}"
        rungs = [Rung(group, "F.gelu", lambda: F.gelu(x), n=n),
                 Rung(group, "F.gelu" + AA_SUFFIX, lambda: F.gelu(x), n=n),
                 Rung(group, "bare launch, kernel[grid](x, out, n, BLOCK)",
                      lambda: ops.gelu_forward_kernel[grid](x, out, n, BLOCK=block), launch="ordinary", n=n)]
        for launch in ("ordinary", "lean"):
            rungs += [Rung(group, "launch helper", lambda: ops.launch_forward(ops.gelu_forward_kernel, x),
                           launch=launch, n=n, context=lean(launch == "lean")),
                      Rung(group, "TritonGELU.apply, no grad", no_grad(ops.TritonGELU.apply, x),
                           launch=launch, n=n, context=lean(launch == "lean")),
                      Rung(group, "gelu(), no grad (no Function built)", no_grad(ops.gelu, x),
                           launch=launch, n=n, context=lean(launch == "lean"))]
        yield rungs

        group = f"forward + backward, 2**{n.bit_length() - 1}"
        book_call = forward_backward(book.TritonGELU.apply, x, g)

        def book_step():
            book_call()
            book.captured_grads.clear()  # it keeps a copy of every grad_output it receives
            book.call_order.clear()
        rungs = [Rung(group, "F.gelu", forward_backward(F.gelu, x, g), n=n),
                 Rung(group, "F.gelu" + AA_SUFFIX, forward_backward(F.gelu, x, g), n=n),
                 Rung(group, "the book's TritonGELU (04)", book_step, launch="ordinary", n=n)]
        for launch in ("ordinary", "lean"):
            rungs.append(Rung(group, "TritonGELU", forward_backward(ops.TritonGELU.apply, x, g),
                              launch=launch, n=n, context=lean(launch == "lean")))
        if triton_op is not None:
            rungs.append(Rung(group, "triton_op + register_autograd", forward_backward(triton_op.gelu, x, g),
                              launch="ordinary", n=n))
        rungs.append(Rung(group, "define/impl ops inside a Function", forward_backward(define_impl.apply, x, g),
                          launch="ordinary", n=n))
        yield rungs

    rows = 4 if args.dry_run and ops.DEVICE.type != "cuda" else 64
    torch.manual_seed(0)
    batch = torch.randn(rows, train_mlp.WIDTH, device=ops.DEVICE)
    target = torch.randn(rows, train_mlp.WIDTH, device=ops.DEVICE)
    group = f"MLP step ({rows} x {train_mlp.WIDTH})"
    reference, copy, triton_block = (train_mlp.mlp_block(name).to(ops.DEVICE)
                                     for name in ("nn.GELU", "nn.GELU", "TritonGELU"))
    yield [Rung(group, "nn.GELU", mlp_step(reference, batch, target), n=rows),
           Rung(group, "nn.GELU" + AA_SUFFIX, mlp_step(copy, batch, target), n=rows),
           Rung(group, "TritonGELU", mlp_step(triton_block, batch, target), launch="ordinary", n=rows),
           Rung(group, "TritonGELU", mlp_step(triton_block, batch, target), launch="lean", n=rows,
                context=lean(True))]
    del library


if __name__ == "__main__":
    sys.exit(run_mode("eager", __doc__.split("\n\n")[0], build, with_do_bench=True))
