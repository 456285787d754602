"""
Exercises for Chapter 17: fix the backward, write the backward
==============================================================

Each exercise is a ``torch.autograd.Function`` with a short spec. The backward checker
(``backward_checker.py``) grades it: it calls the op the ways autograd really calls it and
names the trap it finds. Run all of them::

    python practice/exercises.py               # your versions: each PASS, or the trap still there
    python practice/exercises.py --solutions   # the solutions (practice/solutions.py)

Exercises 1 to 7 carry one of the chapter's traps each: find it, fix it, run this file
again. Exercises 8 and 9 have a Triton forward kernel and no backward yet: write it
(exercise 8 takes two inputs, so its backward returns two gradients). Try each before
you look at ``solutions.py``.
"""
import argparse
import dataclasses
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root, for hardened_ops
sys.path.insert(0, str(Path(__file__).resolve().parent))  # for backward_checker
from hardened_ops import (  # noqa: E402  (picks the backend before triton is imported)
    DEVICE, block_for, device_of, gelu_backward_kernel, gelu_backward_kernel_buggy_no_chain_rule,
    gelu_forward_kernel, kernel_operands, launch_backward, launch_forward, no_double_backward)
from backward_checker import check_backward  # noqa: E402

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


def gelu_local_derivative(x):
    """d/dx [x * Phi(x)] = Phi(x) + x * phi(x), in PyTorch."""
    return 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0))) + x * torch.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


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


class SquareInFloat64(torch.autograd.Function):
    """Exercise 6. x * x. Its backward works in float64, for accuracy."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return 2.0 * x.double() * grad_output.double()


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
# Write the backward: the forward kernels are given
# ---------------------------------------------------------------------------

@triton.jit
def mul_forward_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    y = tl.load(y_ptr + offsets, mask=mask, other=0.0)
    tl.store(out_ptr + offsets, x * y, mask=mask)


@triton.jit
def silu_forward_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    sigmoid = 1.0 / (1.0 + tl.exp(-x))  # not tl.sigmoid: the interpreter refuses it when triton was imported first
    tl.store(out_ptr + offsets, x * sigmoid, mask=mask)  # silu(x) = x * sigmoid(x)


def launch_elementwise(kernel, *tensors):
    """out = kernel(*tensors), elementwise, with the hardened checks: the two-input version of launch_forward."""
    tensors = kernel_operands(*tensors)
    out = torch.empty_like(tensors[0])
    n = out.numel()
    BLOCK = block_for(out)
    with device_of(out):
        kernel[(triton.cdiv(n, BLOCK),)](*tensors, out, n, BLOCK=BLOCK)
    return out


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
# Grading: each exercise, its inputs, its reference, and the trap it plants
# ---------------------------------------------------------------------------

@dataclasses.dataclass
class Exercise:
    number: int
    name: str
    reference: object
    planted: str            # the trap the unsolved version has ("not written yet" for 8 and 9)
    inputs: int = 1          # how many (3, 5) float32 inputs
    second_order: bool = False


def gelu_reference(x):
    return torch.nn.functional.gelu(x, approximate="none")


EXERCISES = [
    Exercise(1, "GELUNoChainRule", gelu_reference, "ignores grad_output"),
    Exercise(2, "GELUFirstElement", gelu_reference, "assumes a uniform grad_output"),
    Exercise(3, "GELUSharedDerivative", gelu_reference, "assumes a single use"),
    Exercise(4, "GELUInPlace", gelu_reference, "mutates grad_output in place"),
    Exercise(5, "GELURawLaunch", gelu_reference, "assumes a contiguous grad_output"),
    Exercise(6, "SquareInFloat64", lambda x: x * x, "returns the wrong gradients"),
    Exercise(7, "GELUAsPrinted", gelu_reference, "a silently wrong second derivative", second_order=True),
    Exercise(8, "TritonMul", lambda x, y: x * y, "crashes", inputs=2),
    Exercise(9, "TritonSiLU", torch.nn.functional.silu, "crashes"),
]


def exercise_inputs(exercise):
    return tuple(torch.randn(3, 5, generator=torch.Generator().manual_seed(20 + i)).to(DEVICE)
                 for i in range(exercise.inputs))


def grade(exercise, module):
    """The checker's report on module's version of exercise."""
    return check_backward(getattr(module, exercise.name), *exercise_inputs(exercise), reference=exercise.reference,
                          second_order=exercise.second_order, name=f"{exercise.number}. {exercise.name}")


def main(argv=None):
    parser = argparse.ArgumentParser(description="Grade the Chapter 17 exercises with the backward checker.")
    parser.add_argument("--solutions", action="store_true", help="grade practice/solutions.py instead")
    parser.add_argument("--only", type=int, action="append", help="grade only exercise N (repeatable)")
    args = parser.parse_args(argv)
    if args.solutions:
        import solutions as module
    else:
        module = sys.modules[__name__]
    chosen = [e for e in EXERCISES if not args.only or e.number in args.only]
    if not chosen:
        parser.error(f"no exercise numbered {args.only}; they are 1 to {len(EXERCISES)}")
    solved = 0
    for exercise in chosen:
        report = grade(exercise, module)
        solved += report.clean
        print(f"PASS  {report.name}" if report.clean else str(report))
    print(f"{solved} of {len(chosen)} exercises pass")
    return 0 if solved == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
