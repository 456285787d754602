# /// script
# requires-python = ">=3.10"
# dependencies = [
#     "torch==2.13.0",
#     "triton==3.7.1; sys_platform == 'linux'",
#     "triton-windows==3.7.1.post27; sys_platform == 'win32'",
#     "numpy==2.4.6; python_version >= '3.11'",
#     "numpy==2.2.6; python_version < '3.11'",
#     "matplotlib==3.10.9",
# ]
# ///
"""
Beyond the chapter: TritonGELU trained inside a real model
==========================================================

Not part of Chapter 17. The chapter's lesson is that a custom op must be tested
the way it is used. Here it is used: the same MLP block (LayerNorm -> Linear(256,
1024) -> GELU -> Linear(1024, 256)) is trained three times, from identical initial
weights and data, with ``torch.nn.GELU``, with the chapter's ``TritonGELU``, and
with ``TritonGELUBuggy``, whose backward never multiplies by grad_output. The
loss at each step is printed as a table and drawn as a PNG: TritonGELU's curve
lies on nn.GELU's, and the buggy backward's leaves them. That is Chapter 16's bug
found by nothing more than training.

Run it with ``python extras/train_mlp.py`` (options: ``--help``), on a CUDA GPU or
on the CPU through Triton's interpreter. ``--compile`` needs a GPU.

Self-contained on purpose: its kernels and helpers are copies of
04_standalone_complete.py's, and tests/test_drift.py keeps them identical.
"""
import argparse
import contextlib
import functools
import os
import sys
from pathlib import Path

import torch

# Added: choose where the kernels run before triton is imported and any kernel
# is defined. The interpreter is switched on through the environment, so this
# must come first; a TRITON_INTERPRET that the reader switched on is kept.
# Triton 3.7 reads 1, true, yes, y and on, in any case, as on; older releases only
# 1. Any of them is written back as 1, so that every release interprets.
if os.environ.get("TRITON_INTERPRET", "").lower() in ("1", "true", "yes", "y", "on"):  # changed: not "1" alone
    os.environ["TRITON_INTERPRET"] = "1"  # changed: the one spelling every Triton release reads as on
    DEVICE = torch.device("cpu")
    print("TRITON_INTERPRET=1: running on the CPU through the Triton interpreter", file=sys.stderr)
elif torch.cuda.is_available():
    DEVICE = torch.device("cuda", torch.cuda.current_device())
    print(f"running on {torch.cuda.get_device_name(DEVICE)} ({'ROCm' if torch.version.hip else 'CUDA'})", file=sys.stderr)
else:
    os.environ["TRITON_INTERPRET"] = "1"
    DEVICE = torch.device("cpu")
    print("no CUDA GPU visible: running on the CPU through the Triton interpreter", file=sys.stderr)

import triton  # noqa: E402  (after the backend choice above)
import triton.language as tl  # noqa: E402



# ---------------------------------------------------------------------------
# The kernels and launch helpers, copied from 04_standalone_complete.py
# ---------------------------------------------------------------------------

@triton.jit
def compute_dtype(v):
    # Added: tl.math.erf takes only fp32 and fp64, so fp16 and bf16 values are
    # computed in fp32; fp64 stays fp64. tl.store rounds back to the tensor's dtype.
    if v.dtype != tl.float64:
        v = v.to(tl.float32)
    return v


@triton.jit
def gelu_forward_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)  # changed: int64, or pid * BLOCK wraps past 2**31 elements
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = compute_dtype(tl.load(x_ptr + offsets, mask=mask, other=0.0))  # changed: fp16/bf16 in fp32
    SQRT_2_INV: tl.constexpr = 0.7071067811865476
    cdf = 0.5 * (1.0 + tl.math.erf(x * SQRT_2_INV))
    out = x * cdf
    tl.store(out_ptr + offsets, out, mask=mask)


@triton.jit
def gelu_backward_kernel(grad_out_ptr, x_ptr, grad_in_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)  # changed: int64, or pid * BLOCK wraps past 2**31 elements
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = compute_dtype(tl.load(x_ptr + offsets, mask=mask, other=0.0))  # changed: fp16/bf16 in fp32
    grad_out = compute_dtype(tl.load(grad_out_ptr + offsets, mask=mask, other=0.0))  # changed: as x
    SQRT_2_INV: tl.constexpr = 0.7071067811865476
    SQRT_2PI_INV: tl.constexpr = 0.3989422804014327
    cdf = 0.5 * (1.0 + tl.math.erf(x * SQRT_2_INV))
    pdf = SQRT_2PI_INV * tl.exp(-0.5 * x * x)
    d_gelu = cdf + x * pdf  # d/dx[x * Phi(x)] = Phi(x) + x * phi(x)
    grad_in = grad_out * d_gelu  # the chain rule: dL/dx = dL/dz * dz/dx
    tl.store(grad_in_ptr + offsets, grad_in, mask=mask)


@triton.jit
def gelu_backward_kernel_buggy_no_chain_rule(grad_out_ptr, x_ptr, grad_in_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)  # changed: int64, or pid * BLOCK wraps past 2**31 elements
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = compute_dtype(tl.load(x_ptr + offsets, mask=mask, other=0.0))  # changed: fp16/bf16 in fp32
    SQRT_2_INV: tl.constexpr = 0.7071067811865476
    SQRT_2PI_INV: tl.constexpr = 0.3989422804014327
    cdf = 0.5 * (1.0 + tl.math.erf(x * SQRT_2_INV))
    pdf = SQRT_2PI_INV * tl.exp(-0.5 * x * x)
    d_gelu = cdf + x * pdf
    tl.store(grad_in_ptr + offsets, d_gelu, mask=mask)  # BUG: never multiplied by grad_out



# Added: the kernels read and write one flat, contiguous run of floats on one
# device of DEVICE's kind (any GPU, or the CPU for the interpreter). Anything else
# would give silently wrong numbers, so it is refused here, or (for other strides)
# copied once into a contiguous tensor.
KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)



def kernel_operands(*tensors):
    for t in tensors:
        if t.dtype not in KERNEL_DTYPES:
            raise TypeError(f"the Triton kernels take float16, bfloat16, float32 or float64 tensors, not {t.dtype}")
        if t.device.type != DEVICE.type:
            raise ValueError(f"a tensor is on {t.device}, but the Triton kernels run on {DEVICE.type} tensors here "
                             f"({DEVICE} is current): move it there with .to({str(DEVICE)!r})")
        if t.device != tensors[0].device:
            raise ValueError(f"the kernels need operands on one device, got {tensors[0].device} and {t.device}")
        if t.shape != tensors[0].shape or t.dtype != tensors[0].dtype:
            raise ValueError(f"the kernels need operands of one shape and dtype, got "
                             f"{tuple(tensors[0].shape)} {tensors[0].dtype} and {tuple(t.shape)} {t.dtype}")
    return tuple(t.contiguous() for t in tensors)  # no copy when already contiguous


# Added: Triton launches on the current CUDA device, which refuses a tensor on another
# GPU (cuda:1 while cuda:0 is current, as on every rank but 0 of a multi-GPU job whose
# scripts were imported before it chose its device), so each launch is made with the
# tensor's own device current.
def device_of(t):
    return torch.cuda.device(t.device) if t.device.type == "cuda" else contextlib.nullcontext()


# Added: the backward methods launch a kernel, so the gradients they return
# carry no graph, and a double backward (create_graph=True, as in a gradient
# penalty) would silently treat them as constants. torch's once_differentiable
# only catches the case where grad_output requires grad, not where x does, so
# the check is made here, on the grad mode that create_graph=True switches on.
def no_double_backward(backward):
    @functools.wraps(backward)
    def backward_without_graph(ctx, *grad_outputs):
        if torch.is_grad_enabled():
            raise RuntimeError(f"{backward.__qualname__} has no derivative of its own: double backward "
                               "(create_graph=True) through the Triton kernels is not supported")
        return backward(ctx, *grad_outputs)
    return backward_without_graph


def _launch(fwd_kernel, x, BLOCK=None):  # changed: BLOCK=1024, see below
    x, = kernel_operands(x)  # added: dtype and device checked, any strides made contiguous
    BLOCK = BLOCK or 4096 // x.element_size()  # added: 4 KiB a program; fp32 keeps 1024, bf16 gets 2048
    out = torch.empty_like(x)
    n = x.numel()
    grid = (triton.cdiv(n, BLOCK),)
    with device_of(x):  # added: launch on x's own GPU, any cuda:N
        fwd_kernel[grid](x, out, n, BLOCK=BLOCK)
    return out


def _launch_bwd(bwd_kernel, grad_output, x, BLOCK=None):  # changed: BLOCK=1024, see below
    grad_output, x = kernel_operands(grad_output, x)  # added: as in the forward
    BLOCK = BLOCK or 4096 // x.element_size()  # added: 4 KiB a program; fp32 keeps 1024, bf16 gets 2048
    grad_input = torch.empty_like(x)
    n = x.numel()
    grid = (triton.cdiv(n, BLOCK),)
    with device_of(x):  # added: launch on x's own GPU, any cuda:N
        bwd_kernel[grid](grad_output, x, grad_input, n, BLOCK=BLOCK)
    return grad_input


class TritonGELU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = _launch(gelu_forward_kernel, x)
        ctx.save_for_backward(x)
        return out

    @staticmethod
    @no_double_backward
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return _launch_bwd(gelu_backward_kernel, grad_output.contiguous(), x)


class TritonGELUBuggy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = _launch(gelu_forward_kernel, x)
        ctx.save_for_backward(x)
        return out

    @staticmethod
    @no_double_backward
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return _launch_bwd(gelu_backward_kernel_buggy_no_chain_rule, grad_output.contiguous(), x)


# ---------------------------------------------------------------------------
# The model: one MLP block whose activation is chosen by name
# ---------------------------------------------------------------------------

class FunctionActivation(torch.nn.Module):
    def __init__(self, function):
        super().__init__()
        self.function = function

    def forward(self, x):
        return self.function.apply(x)


ACTIVATIONS = {
    "nn.GELU": lambda: torch.nn.GELU(approximate="none"),
    "TritonGELU": lambda: FunctionActivation(TritonGELU),
    "TritonGELUBuggy": lambda: FunctionActivation(TritonGELUBuggy),
}
WIDTH, HIDDEN = 256, 1024


def mlp_block(activation):
    return torch.nn.Sequential(torch.nn.LayerNorm(WIDTH), torch.nn.Linear(WIDTH, HIDDEN),
                               ACTIVATIONS[activation](), torch.nn.Linear(HIDDEN, WIDTH))


def teacher_batches(steps, batch, seed, device):
    """The same regression task for every run: inputs, and a fixed random network's outputs."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed + 1)
    teacher = mlp_block("nn.GELU").to(device).requires_grad_(False)
    for _ in range(steps):  # (no torch.no_grad() here: it would stay on across each yield)
        x = torch.randn(batch, WIDTH, generator=generator).to(device)
        yield x, teacher(x)


def train(activation, steps=30, *, batch=64, seed=0, device=None, bf16=False, checkpoint=False,
          compile=False, lr=1e-3):
    """Trains one block; returns the loss at each step and the trained model."""
    device = device or DEVICE
    torch.manual_seed(seed)  # identical initial weights for every activation
    model = mlp_block(activation).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    forward = torch.compile(model) if compile else model
    losses = []
    for x, target in teacher_batches(steps, batch, seed + 100, device):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            if checkpoint:  # recompute the block's activations in backward instead of storing them
                y = torch.utils.checkpoint.checkpoint(forward, x, use_reentrant=False)
            else:
                y = forward(x)
        loss = torch.nn.functional.mse_loss(y.float(), target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, model


def max_parameter_difference(model_a, model_b):
    return max((a - b).abs().max().item() for a, b in zip(model_a.parameters(), model_b.parameters()))


def plot(curves, path, title):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed: no plot written to {path}", file=sys.stderr)
        return
    figure, axes = plt.subplots(figsize=(7, 4.2))
    styles = {"nn.GELU": dict(color="black", linewidth=3.5, alpha=0.35),
              "TritonGELU": dict(color="tab:blue", linewidth=1.4, linestyle="--"),
              "TritonGELUBuggy": dict(color="tab:red", linewidth=1.4)}
    for name, losses in curves.items():
        axes.plot(range(1, len(losses) + 1), losses, label=name, **styles[name])
    axes.set_yscale("log")
    axes.set_xlabel("step")
    axes.set_ylabel("MSE loss")
    axes.set_title(title)
    axes.legend()
    axes.grid(alpha=0.3)
    figure.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    print(f"plot written to {path}", file=sys.stderr)


def main(argv=None):
    parser = argparse.ArgumentParser(description="Train one MLP block with nn.GELU, TritonGELU and TritonGELUBuggy.")
    parser.add_argument("--steps", type=int, default=30, help="optimizer steps (default: %(default)s)")
    parser.add_argument("--batch", type=int, default=64, help="rows a batch (default: %(default)s)")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast")
    parser.add_argument("--checkpoint", action="store_true", help="activation checkpointing (use_reentrant=False)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (default mode; needs a GPU)")
    parser.add_argument("--plot", default="extras/results/train_mlp.png", help="PNG path (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch < 1:
        parser.error("--steps and --batch must be at least 1")
    if args.compile and DEVICE.type != "cuda":
        parser.error("--compile needs a GPU: torch.compile cannot compile the Triton interpreter's kernels")

    options = dict(steps=args.steps, batch=args.batch, bf16=args.bf16, checkpoint=args.checkpoint, compile=args.compile)
    curves, models = {}, {}
    for name in ACTIVATIONS:
        curves[name], models[name] = train(name, **options)

    # The loss table: every step for short runs, about twenty rows for long ones.
    every = max(1, args.steps // 20)
    print(f"{'step':>5} " + " ".join(f"{name:>16}" for name in curves))
    for step in range(args.steps):
        if step % every == 0 or step == args.steps - 1:
            print(f"{step + 1:>5} " + " ".join(f"{curves[name][step]:>16.6f}" for name in curves))
    print()
    # Over every step, not only the rows above: what "the same curve" rests on.
    for name in ("TritonGELU", "TritonGELUBuggy"):
        gap = max(abs(a - b) for a, b in zip(curves[name], curves["nn.GELU"]))
        print(f"{name} vs nn.GELU, largest loss difference over all {args.steps} steps: {gap:.3e}")
    buggy = curves["TritonGELUBuggy"]
    lowest = min(range(len(buggy)), key=buggy.__getitem__)
    print(f"TritonGELUBuggy's lowest loss: {buggy[lowest]:.6f} at step {lowest + 1}; final {buggy[-1]:.6f}")
    print("TritonGELU vs nn.GELU, largest parameter difference after training:",
          f"{max_parameter_difference(models['TritonGELU'], models['nn.GELU']):.3e}")
    print("TritonGELUBuggy vs nn.GELU, largest parameter difference after training:",
          f"{max_parameter_difference(models['TritonGELUBuggy'], models['nn.GELU']):.3e}")
    where = torch.cuda.get_device_name(DEVICE) if DEVICE.type == "cuda" else "CPU, Triton interpreter"
    extras = ", ".join(label for label, on in (("bf16 autocast", args.bf16), ("checkpointing", args.checkpoint),
                                               ("torch.compile", args.compile)) if on)
    plot(curves, args.plot, f"One MLP block, {args.steps} AdamW steps ({where}{', ' + extras if extras else ''})")


if __name__ == "__main__":
    main()
