"""
Exercises for Chapter 17: fix the backward, write the backward
==============================================================

Each exercise is a ``torch.autograd.Function`` with a short spec. The backward checker
(``backward_checker.py``) grades it: it calls the op the ways autograd really calls it and
names the trap it finds. Edit this file, then run it::

    python practice/exercises.py               # one line an exercise, then "K of N solved"
    python practice/exercises.py --only 2      # one exercise, with the checker's whole report
    python practice/exercises.py --solutions   # the same grading of practice/solutions.py

An exercise not solved yet gets the trap the checker still finds as its hint. Exercises 1
to 7 carry one of the chapter's traps each: find it, fix it, run this file again.
Exercises 8 and 9 have a Triton forward kernel and no backward yet: write it (exercise 8
takes two inputs, so its backward returns two gradients). Exercises 10 to 12 re-create, in
a small Triton kernel, a trap that a real library shipped; each docstring links the real
bug (read it after you have tried). The kernels, helpers and the grading they share with
the solutions are in ``exercise_kit.py``. Try each exercise before you look at
``solutions.py``.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root, for hardened_ops
sys.path.insert(0, str(Path(__file__).resolve().parent))  # for exercise_kit
from hardened_ops import (  # noqa: E402  (picks the backend before triton is imported)
    device_of, gelu_backward_kernel, gelu_backward_kernel_buggy_no_chain_rule, gelu_forward_kernel, kernel_operands,
    launch_backward, launch_forward, no_double_backward)
from exercise_kit import (  # noqa: E402
    CAUSAL_TAP, causal_conv_forward_kernel, command_line, cross_entropy_kernel, gelu_local_derivative,
    launch_elementwise, leave, mul_forward_kernel, parse_arguments, row_block, row_logsumexp_kernel,
    silu_forward_kernel)

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


# ---------------------------------------------------------------------------
# Fix the bug: each backward below is wrong in one of the chapter's ways
# ---------------------------------------------------------------------------

class GELUNoChainRule(torch.autograd.Function):
    """Exercise 1. GELU. Its backward passes every test that calls .sum().backward()."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return launch_forward(gelu_forward_kernel, x)

    @staticmethod
    @no_double_backward
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return launch_backward(gelu_backward_kernel_buggy_no_chain_rule, grad_output, x)


class GELUFirstElement(torch.autograd.Function):
    """Exercise 2. GELU. Its author saw grad_output = 2 everywhere in 17.1 and 5 everywhere in 17.3,
    and kept one number of it."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return launch_forward(gelu_forward_kernel, x)

    @staticmethod
    @no_double_backward
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        scale = grad_output.reshape(-1)[0]  # "it is the same everywhere anyway"
        return scale * gelu_local_derivative(x)


class GELUSharedDerivative(torch.autograd.Function):
    """Exercise 3. GELU. The derivative is computed in forward and kept for backward, to save time."""
    derivative = None

    @staticmethod
    def forward(ctx, x):
        GELUSharedDerivative.derivative = gelu_local_derivative(x)
        return launch_forward(gelu_forward_kernel, x)

    @staticmethod
    @no_double_backward
    def backward(ctx, grad_output):
        return grad_output * GELUSharedDerivative.derivative


class GELUInPlace(torch.autograd.Function):
    """Exercise 4. GELU. Its backward saves a tensor allocation. Its own gradient is right."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return launch_forward(gelu_forward_kernel, x)

    @staticmethod
    @no_double_backward
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output.mul_(gelu_local_derivative(x))


class GELURawLaunch(torch.autograd.Function):
    """Exercise 5. GELU. Its backward launches the chapter's kernel itself, with no helper in between."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return launch_forward(gelu_forward_kernel, x)

    @staticmethod
    @no_double_backward
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        grad_input = torch.empty_like(x)
        n = x.numel()
        with device_of(x):
            gelu_backward_kernel[(triton.cdiv(n, 1024),)](grad_output, x, grad_input, n, BLOCK=1024)
        return grad_input


class ScaleColumns(torch.autograd.Function):
    """Exercise 6. out = x * w for x of shape (rows, columns) and w of shape (columns,): one weight a
    column, broadcast over the rows. Its backward returns one gradient for each input."""
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, grad_output):
        x, w = ctx.saved_tensors
        return grad_output * w, (grad_output * x).sum(dim=1)


class GELUAsPrinted(torch.autograd.Function):
    """Exercise 7 (checked with second_order=True). GELU, as the chapter prints it. Used in a
    gradient penalty (create_graph=True), it must refuse, or give the right second derivative."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return launch_forward(gelu_forward_kernel, x)

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return launch_backward(gelu_backward_kernel, grad_output, x)


# ---------------------------------------------------------------------------
# Write the backward: the forward kernels are given (in exercise_kit.py)
# ---------------------------------------------------------------------------

class TritonMul(torch.autograd.Function):
    """Exercise 8. out = x * y, for x and y of one shape. Write backward: it returns two gradients,
    (dL/dx, dL/dy), and None for an input that needs none (ctx.needs_input_grad)."""
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return launch_elementwise(mul_forward_kernel, x, y)

    @staticmethod
    def backward(ctx, grad_output):
        raise NotImplementedError("exercise 8: write TritonMul.backward")


class TritonSiLU(torch.autograd.Function):
    """Exercise 9. out = silu(x) = x * sigmoid(x) (float32 and float64 in, float32 compute).
    Write backward. d/dx silu(x) = sigmoid(x) * (1 + x * (1 - sigmoid(x)))."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return launch_elementwise(silu_forward_kernel, x)

    @staticmethod
    def backward(ctx, grad_output):
        raise NotImplementedError("exercise 9: write TritonSiLU.backward")


# ---------------------------------------------------------------------------
# Bugs that real libraries shipped: find the trap, fix it (the forward kernels are in exercise_kit.py)
# ---------------------------------------------------------------------------

@triton.jit
def row_logsumexp_backward_kernel(grad_out_ptr, x_ptr, out_ptr, grad_in_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    lse = tl.load(out_ptr + row).to(tl.float32)
    grad_out = tl.load(grad_out_ptr).to(tl.float32)  # the loss's grad_output
    tl.store(grad_in_ptr + row * n_cols + cols, grad_out * tl.exp(x - lse), mask=mask)  # d lse / dx = softmax(x)


class RowLogSumExp(torch.autograd.Function):
    """Exercise 10. A loss per row: out[r] = log(sum_c exp(x[r, c])) for x of shape (rows, cols), so out
    has shape (rows,), like a cross-entropy with reduction="none". Its tests called .mean().backward().

    The real bug: Liger-Kernel's cross-entropy with reduction="none" scaled every row's gradient
    by grad_output[0]: https://github.com/linkedin/Liger-Kernel/issues/678, fixed by
    https://github.com/linkedin/Liger-Kernel/pull/680."""
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
            row_logsumexp_backward_kernel[(x.shape[0],)](grad_output, x, out, grad_input, x.shape[1],
                                                         BLOCK=row_block(x))
        return grad_input


@triton.jit
def causal_conv_backward_kernel(dy_ptr, dx_ptr, n_steps, n_channels, TAP: tl.constexpr, BLOCK: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    d = tl.arange(0, BLOCK)
    mask = d < n_channels
    dy_now = tl.load(dy_ptr + t * n_channels + d, mask=mask, other=0.0)
    dy_next = tl.load(dy_ptr + (t + 1) * n_channels + d, mask=mask & (t + 1 < n_steps), other=0.0)
    tl.store(dx_ptr + t * n_channels + d, dy_now + TAP * dy_next, mask=mask)  # x[t] feeds y[t] and y[t + 1]


class CausalConv(torch.autograd.Function):
    """Exercise 11. A causal convolution over time with fixed taps: y[t, d] = x[t, d] + 0.5 * x[t - 1, d],
    for x of shape (time steps, channels). Its forward reads x with x's own strides. Its backward is
    right when y's gradient arrives contiguous; in a model it often arrives as a narrow view (the
    gradient of torch.cat is a split of its grad_output, and fused q, k, v projections are split too).

    The real bug: flash-linear-attention's causal_conv1d backward read dy with hard-coded strides
    and was wrong after torch.cat: fixed by https://github.com/fla-org/flash-linear-attention/pull/871."""
    @staticmethod
    def forward(ctx, x):
        kernel_operands(x)  # the dtype and device checks; the kernel reads x with its strides as it is
        steps, channels = x.shape
        y = torch.empty((steps, channels), dtype=x.dtype, device=x.device)
        with device_of(x):
            causal_conv_forward_kernel[(steps,)](x, y, channels, x.stride(0), x.stride(1), TAP=CAUSAL_TAP,
                                                 BLOCK=row_block(x))
        return y

    @staticmethod
    @no_double_backward
    def backward(ctx, grad_output):
        steps, channels = grad_output.shape
        grad_input = torch.empty((steps, channels), dtype=grad_output.dtype, device=grad_output.device)
        with device_of(grad_output):
            causal_conv_backward_kernel[(steps,)](grad_output, grad_input, steps, channels, TAP=CAUSAL_TAP,
                                                  BLOCK=row_block(grad_output))
        return grad_input


class CrossEntropyInPlace(torch.autograd.Function):
    """Exercise 12. Cross-entropy of logits (rows, classes) against integer targets (rows,), averaged
    over the rows: a 0-dim loss. The forward kernel computes each row's gradient too (a fused loss: its
    backward only scales it by grad_output), and, to save memory, stores it where the logits were.
    Its own gradient is right. Its tests never used the logits for anything else.

    The real bug: Liger-Kernel's cross-entropy stores the gradient in its input logits during forward.
    A softmax before it, which saved its output for its own backward, got wrong gradients:
    https://github.com/linkedin/Liger-Kernel/issues/272 (an opt-out, inplace=False, is proposed in
    https://github.com/linkedin/Liger-Kernel/pull/1251)."""
    @staticmethod
    def forward(ctx, logits, targets):
        logits, = kernel_operands(logits)
        rows, classes = logits.shape
        losses = torch.empty(rows, dtype=torch.float32, device=logits.device)
        with device_of(logits):
            cross_entropy_kernel[(rows,)](logits, targets.contiguous(), losses, logits, classes, 1.0 / rows,
                                          BLOCK=row_block(logits))
        ctx.save_for_backward(logits)  # it holds the gradient of the mean loss now
        return losses.mean().to(logits.dtype)

    @staticmethod
    @no_double_backward
    def backward(ctx, grad_output):
        grad_logits, = ctx.saved_tensors
        return grad_logits * grad_output, None


def main(argv=None):
    chosen, args = parse_arguments(argv, "practice/exercises.py", "Grade your versions of the Chapter 17 exercises.",
                                   solutions_flag=True)
    if args.solutions:
        import solutions as module
    else:
        module = sys.modules[__name__]
    return command_line(module, chosen, details=bool(args.only))


if __name__ == "__main__":
    leave(main())  # sys.exit(main()), without the interpreter's teardown: exercise_kit.leave says why
