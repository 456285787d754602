# /// script
# requires-python = ">=3.10"
# dependencies = [
#     "torch==2.13.0",
#     "triton==3.7.1; sys_platform == 'linux'",
#     "triton-windows==3.7.1.post27; sys_platform == 'win32'",
#     "numpy==2.4.6; python_version >= '3.11'",
#     "numpy==2.2.6; python_version < '3.11'",
# ]
# ///
"""
Chapter 17 standalone: chaining a custom autograd.Function inside ordinary
PyTorch expressions, reading the resulting graph structure directly, and
confirming how grad_output is assembled when a value has more than one
consumer.

Companion to Chapter 17, sections 17.1 to 17.3 in one file; its stdout is the
chapter's "Expected Output" block.

Run it with ``python 04_standalone_complete.py``. It uses a CUDA GPU when
PyTorch sees one, and Triton's interpreter on the CPU otherwise (or whenever
``TRITON_INTERPRET=1`` is set); stdout is the same on both.

This file is self-contained on purpose: its kernels and helpers are repeated,
identically, in 01_chained_expression.py, 02_graph_structure.py and
03_fan_in.py, and tests/test_drift.py keeps the copies in step.
Lines that differ from the printed listing carry a comment saying why.
"""
import contextlib
import functools
import os
import sys

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
# Shared kernels: GELU forward/backward (correct and buggy), and square
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


@triton.jit
def square_forward_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)  # changed: int64, or pid * BLOCK wraps past 2**31 elements
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = compute_dtype(tl.load(x_ptr + offsets, mask=mask, other=0.0))  # changed: fp16/bf16 in fp32
    tl.store(out_ptr + offsets, x * x, mask=mask)


@triton.jit
def square_backward_kernel(grad_out_ptr, x_ptr, grad_in_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)  # changed: int64, or pid * BLOCK wraps past 2**31 elements
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = compute_dtype(tl.load(x_ptr + offsets, mask=mask, other=0.0))  # changed: fp16/bf16 in fp32
    grad_out = compute_dtype(tl.load(grad_out_ptr + offsets, mask=mask, other=0.0))  # changed: as x
    tl.store(grad_in_ptr + offsets, grad_out * 2.0 * x, mask=mask)  # d/dx[x^2] = 2x, times dL/dy


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


call_order = []
captured_grads = []


class TritonGELU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = _launch(gelu_forward_kernel, x)
        ctx.save_for_backward(x)
        return out

    @staticmethod
    @no_double_backward  # added: refuse create_graph=True rather than return a wrong second derivative
    def backward(ctx, grad_output):
        call_order.append("TritonGELU.backward")
        captured_grads.append(grad_output.clone())
        x, = ctx.saved_tensors
        return _launch_bwd(gelu_backward_kernel, grad_output.contiguous(), x)


class TritonGELUBuggy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = _launch(gelu_forward_kernel, x)
        ctx.save_for_backward(x)
        return out

    @staticmethod
    @no_double_backward  # added: refuse create_graph=True rather than return a wrong second derivative
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return _launch_bwd(gelu_backward_kernel_buggy_no_chain_rule, grad_output.contiguous(), x)


class TritonSquare(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = _launch(square_forward_kernel, x)
        ctx.save_for_backward(x)
        return out

    @staticmethod
    @no_double_backward  # added: refuse create_graph=True rather than return a wrong second derivative
    def backward(ctx, grad_output):
        call_order.append("TritonSquare.backward")
        x, = ctx.saved_tensors
        return _launch_bwd(square_backward_kernel, grad_output.contiguous(), x)


def section_17_1():
    print("=== Section 17.1: chained expression, and the chain-rule bug surfacing on its own ===")
    torch.manual_seed(3)
    x = torch.randn(6).to(DEVICE).requires_grad_(True)  # changed: CPU generator (the chapter's values), then DEVICE

    hook_captured = {}
    z = TritonGELU.apply(x)
    z.register_hook(lambda grad: hook_captured.setdefault("z", grad.clone()))
    loss = (2 * z + 1).sum()
    loss.backward()
    # changed: .cpu() on printed tensors, here and in 17.3, so a GPU run prints no device='cuda:0'
    print("grad_output at TritonGELU's node:", hook_captured["z"].cpu())

    x_oracle = x.detach().clone().requires_grad_(True)
    z_oracle = torch.nn.functional.gelu(x_oracle, approximate="none")
    (2 * z_oracle + 1).sum().backward()
    print("correct chain x.grad allclose to oracle?", torch.allclose(x.grad, x_oracle.grad, atol=1e-5))

    x2 = x.detach().clone().requires_grad_(True)
    z2 = TritonGELUBuggy.apply(x2)
    (2 * z2 + 1).sum().backward()
    print("buggy chain x.grad allclose to oracle?  ", torch.allclose(x2.grad, x_oracle.grad, atol=1e-5))


def section_17_2():
    print()
    print("=== Section 17.2: graph structure and backward call order ===")
    torch.manual_seed(4)
    x = torch.randn(4).to(DEVICE).requires_grad_(True)  # changed: CPU generator (the chapter's values), then DEVICE
    z = TritonGELU.apply(x)
    y = TritonSquare.apply(z)

    print("y.grad_fn is TritonSquareBackward?", "TritonSquareBackward" in str(y.grad_fn))
    print("z.grad_fn is TritonGELUBackward?  ", "TritonGELUBackward" in str(z.grad_fn))
    print("y.grad_fn.next_functions[0][0] is z.grad_fn?",
          y.grad_fn.next_functions[0][0] is z.grad_fn)

    call_order.clear()
    y.sum().backward()
    print("backward call order:", call_order)

    x_oracle = x.detach().clone().requires_grad_(True)
    z_oracle = torch.nn.functional.gelu(x_oracle, approximate="none")
    (z_oracle * z_oracle).sum().backward()
    print("x.grad allclose to oracle?", torch.allclose(x.grad, x_oracle.grad, atol=1e-5))


def section_17_3():
    print()
    print("=== Section 17.3: fan-in accumulation ===")
    torch.manual_seed(5)
    x1 = torch.randn(4).to(DEVICE).requires_grad_(True)  # changed: CPU generator (the chapter's values), then DEVICE

    captured_grads.clear()
    z1 = TritonGELU.apply(x1)
    z1.sum().backward()
    print("used once  -> grad_output:", captured_grads[-1].cpu())

    captured_grads.clear()
    x2 = x1.detach().clone().requires_grad_(True)
    z2 = TritonGELU.apply(x2)
    (z2.sum() + z2.sum()).backward()
    print("used twice -> grad_output:", captured_grads[-1].cpu(), " (backward called", len(captured_grads), "time(s))")

    captured_grads.clear()
    x3 = x1.detach().clone().requires_grad_(True)
    z3 = TritonGELU.apply(x3)
    ((2 * z3).sum() + (3 * z3).sum()).backward()
    print("two different consumers (2x + 3x) -> grad_output:", captured_grads[-1].cpu())

    x_oracle = x1.detach().clone().requires_grad_(True)
    z_oracle = torch.nn.functional.gelu(x_oracle, approximate="none")
    ((2 * z_oracle).sum() + (3 * z_oracle).sum()).backward()
    print("x3.grad allclose to oracle?", torch.allclose(x3.grad, x_oracle.grad, atol=1e-5))


if __name__ == "__main__":
    section_17_1()
    section_17_2()
    section_17_3()
