"""
Solutions to the Chapter 17 exercises
=====================================

Each class fixes its exercise in ``exercises.py`` and says what was wrong. Grade them
with ``python practice/exercises.py --solutions``.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root, for hardened_ops
sys.path.insert(0, str(Path(__file__).resolve().parent))  # for exercises
from hardened_ops import (  # noqa: E402  (picks the backend before triton is imported)
    block_for, device_of, gelu_backward_kernel, gelu_forward_kernel, kernel_operands, launch_backward, launch_forward,
    no_double_backward)
from exercises import gelu_local_derivative, launch_elementwise, mul_forward_kernel, silu_forward_kernel  # noqa: E402

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


class GELUNoChainRule(torch.autograd.Function):
    """1. It returned the local derivative alone: right only when grad_output is 1 everywhere, as
    under .sum().backward(). dL/dx = grad_output * dz/dx: launch the kernel that multiplies."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return launch_forward(gelu_forward_kernel, x)

    @staticmethod
    @no_double_backward
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return launch_backward(gelu_backward_kernel, grad_output, x)


class GELUFirstElement(torch.autograd.Function):
    """2. It kept grad_output[0]: right for 2 * z + 1 and for fan-in (2, 1 + 1, 3 + 2 are uniform),
    wrong as soon as what follows is not a scalar multiple (a weight, a mask, a loss per row).
    Multiply elementwise."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return launch_forward(gelu_forward_kernel, x)

    @staticmethod
    @no_double_backward
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output * gelu_local_derivative(x)


class GELUSharedDerivative(torch.autograd.Function):
    """3. It kept the derivative on the class: the last forward's, whichever call's backward runs.
    Used twice in one graph (two layers), the first call's backward used the second's x. Keep
    per-call state on ctx (save_for_backward), never beside the Function."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(gelu_local_derivative(x))
        return launch_forward(gelu_forward_kernel, x)

    @staticmethod
    @no_double_backward
    def backward(ctx, grad_output):
        derivative, = ctx.saved_tensors
        return grad_output * derivative


class GELUInPlace(torch.autograd.Function):
    """4. It multiplied grad_output in place. AddBackward0 hands both of its inputs the same tensor,
    so a sibling branch whose backward ran next received this op's gradient instead of its own.
    Never write to grad_output: make a new tensor."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return launch_forward(gelu_forward_kernel, x)

    @staticmethod
    @no_double_backward
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output * gelu_local_derivative(x)


class GELURawLaunch(torch.autograd.Function):
    """5. It passed grad_output to the kernel as it came. The kernel reads one flat run of memory;
    a transposed grad_output, or the stride-0 one that .sum() hands on, is not laid out that way.
    Make it contiguous first (the chapter's listings do: grad_output.contiguous())."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return launch_forward(gelu_forward_kernel, x)

    @staticmethod
    @no_double_backward
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        grad_output, x = grad_output.contiguous(), x.contiguous()
        grad_input = torch.empty_like(x)
        n = x.numel()
        with device_of(x):
            gelu_backward_kernel[(triton.cdiv(n, 1024),)](grad_output, x, grad_input, n, BLOCK=1024)
        return grad_input


class SquareInFloat64(torch.autograd.Function):
    """6. It returned a float64 gradient for a float32 input. Autograd casts it back silently, after
    the float64 work and memory were spent. Return each gradient in its input's dtype."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return (2.0 * x.double() * grad_output.double()).to(x.dtype)


class GELUAsPrinted(torch.autograd.Function):
    """7. The kernel's output carries no graph, so under create_graph=True the gradient came back as
    a constant and a gradient penalty silently lost GELU's second-order term. Refuse it (as
    hardened_ops.py does), or write the backward in differentiable torch ops."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return launch_forward(gelu_forward_kernel, x)

    @staticmethod
    @no_double_backward
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return launch_backward(gelu_backward_kernel, grad_output, x)


@triton.jit
def mul_backward_kernel(grad_out_ptr, x_ptr, y_ptr, grad_x_ptr, grad_y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    grad_out = tl.load(grad_out_ptr + offsets, mask=mask, other=0.0)
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    y = tl.load(y_ptr + offsets, mask=mask, other=0.0)
    tl.store(grad_x_ptr + offsets, grad_out * y, mask=mask)  # d(x*y)/dx = y
    tl.store(grad_y_ptr + offsets, grad_out * x, mask=mask)  # d(x*y)/dy = x


class TritonMul(torch.autograd.Function):
    """8. Two inputs, so two gradients: dL/dx = grad_output * y, dL/dy = grad_output * x, and None
    for an input that needs none."""
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return launch_elementwise(mul_forward_kernel, x, y)

    @staticmethod
    @no_double_backward
    def backward(ctx, grad_output):
        x, y = ctx.saved_tensors
        grad_output, x, y = kernel_operands(grad_output, x, y)
        grad_x, grad_y = torch.empty_like(x), torch.empty_like(y)
        n = x.numel()
        BLOCK = block_for(x)
        with device_of(x):
            mul_backward_kernel[(triton.cdiv(n, BLOCK),)](grad_output, x, y, grad_x, grad_y, n, BLOCK=BLOCK)
        needs_x, needs_y = ctx.needs_input_grad
        return (grad_x if needs_x else None), (grad_y if needs_y else None)


@triton.jit
def silu_backward_kernel(grad_out_ptr, x_ptr, grad_in_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    grad_out = tl.load(grad_out_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    s = 1.0 / (1.0 + tl.exp(-x))  # sigmoid(x)
    tl.store(grad_in_ptr + offsets, grad_out * s * (1.0 + x * (1.0 - s)), mask=mask)  # d silu/dx, times dL/dz


class TritonSiLU(torch.autograd.Function):
    """9. dL/dx = grad_output * sigmoid(x) * (1 + x * (1 - sigmoid(x)))."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return launch_elementwise(silu_forward_kernel, x)

    @staticmethod
    @no_double_backward
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return launch_backward(silu_backward_kernel, grad_output, x)
