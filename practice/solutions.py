"""
Solutions to the Chapter 17 exercises
=====================================

Each class fixes its exercise in ``exercises.py`` and says what was wrong. This file
imports only what the exercises share (``exercise_kit.py``), never ``exercises.py``, so
your edits there cannot change an answer here. Run it to check the solutions::

    python practice/solutions.py            # each solution graded as yours are: "N of N solved"
    python practice/solutions.py --only 8   # one, with the checker's whole report

(``python practice/exercises.py --solutions`` grades them the same way.)
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root, for hardened_ops
sys.path.insert(0, str(Path(__file__).resolve().parent))  # for exercise_kit
from hardened_ops import (  # noqa: E402  (picks the backend before triton is imported)
    block_for, device_of, gelu_backward_kernel, gelu_forward_kernel, kernel_operands, launch_backward, launch_forward,
    no_double_backward)
from exercise_kit import (  # noqa: E402
    CAUSAL_TAP, EXERCISES, causal_conv_forward_kernel, command_line, cross_entropy_kernel, gelu_local_derivative,
    launch_elementwise, leave, mul_forward_kernel, parse_arguments, row_block, row_logsumexp_kernel,
    silu_forward_kernel)

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
    """5. It passed grad_output and x to the kernel as they came. The kernel reads both as one flat run
    of memory, so it was right only while grad_output was laid out like x: a transposed grad_output
    for a contiguous x, or the stride-0 one that .sum() hands on, is not. Make both contiguous first
    (the chapter's listings do: grad_output.contiguous())."""
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


class ScaleColumns(torch.autograd.Function):
    """6. It summed grad_output * x over the columns (dim=1): a (rows,) gradient for a (columns,)
    weight, which autograd refuses. Each gradient has its input's shape: w was broadcast over the
    rows, so its gradient sums over them, dim=0 (each weight's uses, as fan-in sums a tensor's).
    (Returning the whole (rows, columns) product would pass: autograd sums a gradient whose shape
    its input broadcasts to, after the wasted work.)"""
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, grad_output):
        x, w = ctx.saved_tensors
        grad_x = grad_output * w if ctx.needs_input_grad[0] else None
        grad_w = (grad_output * x).sum(dim=0) if ctx.needs_input_grad[1] else None
        return grad_x, grad_w


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


@triton.jit
def row_logsumexp_backward_kernel(grad_out_ptr, grad_out_stride, x_ptr, out_ptr, grad_in_ptr, n_cols,
                                  BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    lse = tl.load(out_ptr + row).to(tl.float32)
    grad_out = tl.load(grad_out_ptr + row * grad_out_stride).to(tl.float32)  # this row's own grad_output
    tl.store(grad_in_ptr + row * n_cols + cols, grad_out * tl.exp(x - lse), mask=mask)


class RowLogSumExp(torch.autograd.Function):
    """10. The kernel loaded grad_output[0] for every row: right under .mean() or .sum(), whose grad_output
    is uniform, wrong once rows are weighted or masked (the reason to ask for a loss per row). Load each
    row's own grad_output[row], with its stride (after .sum() it is 0). Liger-Kernel's fix (PR #680)
    does the same: it loads grad_output per row when reduction="none"."""
    @staticmethod
    def forward(ctx, x):
        x, = kernel_operands(x)
        out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
        with device_of(x):
            row_logsumexp_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=row_block(x))
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    @no_double_backward
    def backward(ctx, grad_output):
        x, out = ctx.saved_tensors
        grad_input = torch.empty_like(x)
        with device_of(x):
            row_logsumexp_backward_kernel[(x.shape[0],)](grad_output, grad_output.stride(0), x, out, grad_input,
                                                         x.shape[1], BLOCK=row_block(x))
        return grad_input


@triton.jit
def causal_conv_backward_kernel(dy_ptr, dx_ptr, n_steps, n_channels, stride_t, stride_d, TAP: tl.constexpr,
                                BLOCK: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    d = tl.arange(0, BLOCK)
    mask = d < n_channels
    dy_now = tl.load(dy_ptr + t * stride_t + d * stride_d, mask=mask, other=0.0)
    dy_next = tl.load(dy_ptr + (t + 1) * stride_t + d * stride_d, mask=mask & (t + 1 < n_steps), other=0.0)
    tl.store(dx_ptr + t * n_channels + d, dy_now + TAP * dy_next, mask=mask)


class CausalConv(torch.autograd.Function):
    """11. The backward kernel addressed dy as t * channels + d, the strides of a contiguous tensor. After
    torch.cat (whose backward splits its grad_output into narrow views), a transpose or a .sum(), dy has
    other strides, and the kernel read the wrong elements, silently. Pass dy's own strides to the kernel,
    as the forward does for x (flash-linear-attention's fix, PR #871, does this); grad_output.contiguous()
    is also right, at the cost of a copy."""
    @staticmethod
    def forward(ctx, x):
        kernel_operands(x)
        steps, channels = x.shape
        y = torch.empty((steps, channels), dtype=x.dtype, device=x.device)
        with device_of(x):
            causal_conv_forward_kernel[(steps,)](x, y, channels, x.stride(0), x.stride(1), TAP=CAUSAL_TAP,
                                                 BLOCK=row_block(x))
        return y

    @staticmethod
    @no_double_backward
    def backward(ctx, grad_output):
        kernel_operands(grad_output)
        steps, channels = grad_output.shape
        grad_input = torch.empty((steps, channels), dtype=grad_output.dtype, device=grad_output.device)
        with device_of(grad_output):
            causal_conv_backward_kernel[(steps,)](grad_output, grad_input, steps, channels, grad_output.stride(0),
                                                  grad_output.stride(1), TAP=CAUSAL_TAP, BLOCK=row_block(grad_output))
        return grad_input


class CrossEntropyInPlace(torch.autograd.Function):
    """12. The forward stored the gradient in the logits themselves. Triton's stores do not bump a tensor's
    version counter, so autograd could not notice: any other consumer of the logits (a softmax before the
    loss that saved its output, a second loss on the same logits, a logging hook) then read gradients where
    it expected logits. Store the gradient in a fresh tensor. It costs one more logits-sized tensor, kept
    from forward to backward: for 8192 tokens and a 128256-word vocabulary in float32, 8192 * 128256 * 4
    bytes = 4.2 GB. Liger-Kernel takes that trade knowingly, to save exactly this memory: the overwrite is
    on purpose and written down in its source (issue #272 is what it costs a caller who did not know)."""
    @staticmethod
    def forward(ctx, logits, targets):
        logits, = kernel_operands(logits)
        rows, classes = logits.shape
        losses = torch.empty(rows, dtype=torch.float32, device=logits.device)
        grad_logits = torch.empty_like(logits)
        with device_of(logits):
            cross_entropy_kernel[(rows,)](logits, targets.contiguous(), losses, grad_logits, classes, 1.0 / rows,
                                          BLOCK=row_block(logits))
        ctx.save_for_backward(grad_logits)
        return losses.mean().to(logits.dtype)

    @staticmethod
    @no_double_backward
    def backward(ctx, grad_output):
        grad_logits, = ctx.saved_tensors
        return grad_logits * grad_output, None


# For the checker's own command line (python practice/backward_checker.py practice/solutions.py): each
# Function's inputs, as the exercises give them. With no reference here, it checks by finite differences.
example_inputs = {exercise.name: exercise.inputs for exercise in EXERCISES}


def main(argv=None):
    chosen, args = parse_arguments(argv, "practice/solutions.py", "Check the solutions to the Chapter 17 exercises.",
                                   solutions_flag=False)
    return command_line(sys.modules[__name__], chosen, details=bool(args.only))


if __name__ == "__main__":
    leave(main())  # sys.exit(main()), without the interpreter's teardown: exercise_kit.leave says why
