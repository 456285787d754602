"""
What the exercises and their solutions share: kernels, helpers, the list, the grading
=====================================================================================

``exercises.py`` (yours to edit) and ``solutions.py`` (the answer key) both import this
file, and neither imports the other, so an edit to an exercise never changes a solution.
It holds:

1. the helpers and forward kernels the exercises are built on (edit them here only if you
   mean to change every exercise and every solution with them);
2. ``EXERCISES``: each exercise's number, Function name, inputs, reference and the trap its
   unsolved version plants;
3. the grading: ``grade`` runs the backward checker (``backward_checker.py``) on one
   exercise, ``score`` prints one line an exercise, solved or a hint, and ends with
   "K of N solved";
4. the command line both files share: ``[--only N ...]``.
"""
import argparse
import dataclasses
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root, for hardened_ops
sys.path.insert(0, str(Path(__file__).resolve().parent))  # for backward_checker
from hardened_ops import DEVICE, block_for, device_of, kernel_operands  # noqa: E402  (picks the backend first)
from backward_checker import check_backward  # noqa: E402
from backward_check.report import CRASHES, WASTED_GRADIENT  # noqa: E402

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


# ---------------------------------------------------------------------------
# 1. Helpers and forward kernels
# ---------------------------------------------------------------------------

def gelu_local_derivative(x):
    """d/dx [x * Phi(x)] = Phi(x) + x * phi(x), in PyTorch."""
    return 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0))) + x * torch.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


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


def row_block(x):
    """One program a row, the whole row in one block: the next power of two at or above its length."""
    return triton.next_power_of_2(x.shape[-1])


# The row kernels reduce with tl.reduce, not tl.max and tl.sum: those are Triton's own jit functions,
# which its interpreter cannot call where triton was imported before the interpreter was switched on
# (as in a notebook's first cell). These two are the combine functions where a Triton lacks the two below.
@triton.jit
def _maximum(a, b):
    return tl.maximum(a, b)


@triton.jit
def _add(a, b):
    return a + b


# Where this Triton has them, tl.reduce is given the combine functions that tl.max and tl.sum reduce
# with: the interpreter recognises those and reduces with NumPy, over 20 times faster than calling
# a combine function once per element. Compiled for a GPU, the two are the same code.
maximum = getattr(tl.standard, "_elementwise_max", _maximum)
add = getattr(tl.standard, "_sum_combine", _add)


@triton.jit
def row_logsumexp_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    """out[row] = log(sum_c exp(x[row, c])), for a contiguous x: one program a row."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
    largest = tl.reduce(x, 0, maximum)
    tl.store(out_ptr + row, largest + tl.log(tl.reduce(tl.exp(x - largest), 0, add)))


@triton.jit
def causal_conv_forward_kernel(x_ptr, y_ptr, n_channels, stride_t, stride_d, TAP: tl.constexpr, BLOCK: tl.constexpr):
    """y[t, d] = x[t, d] + TAP * x[t - 1, d] (x[-1] = 0), for x of any strides; y contiguous. One program a
    time step."""
    t = tl.program_id(0).to(tl.int64)
    d = tl.arange(0, BLOCK)
    mask = d < n_channels
    now = tl.load(x_ptr + t * stride_t + d * stride_d, mask=mask, other=0.0)
    before = tl.load(x_ptr + (t - 1) * stride_t + d * stride_d, mask=mask & (t > 0), other=0.0)
    tl.store(y_ptr + t * n_channels + d, now + TAP * before, mask=mask)


@triton.jit
def cross_entropy_kernel(x_ptr, target_ptr, loss_ptr, grad_ptr, n_cols, scale, BLOCK: tl.constexpr):
    """For each row of a contiguous x: loss[row] = logsumexp(x[row]) - x[row, target[row]], and its gradient
    times scale, (softmax(x[row]) - onehot(target[row])) * scale, stored at grad_ptr. The row is read whole
    before its gradient is stored, so grad_ptr may be x_ptr itself."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=float("-inf")).to(tl.float32)
    target = tl.load(target_ptr + row)
    largest = tl.reduce(x, 0, maximum)
    exps = tl.exp(x - largest)
    total = tl.reduce(exps, 0, add)
    x_target = tl.reduce(tl.where(cols == target, x, 0.0), 0, add)
    tl.store(loss_ptr + row, largest + tl.log(total) - x_target)
    grad = (exps / total - tl.where(cols == target, 1.0, 0.0)) * scale
    tl.store(grad_ptr + row * n_cols + cols, grad, mask=mask)


CAUSAL_TAP = 0.5  # exercise 11's causal convolution: y[t] = x[t] + 0.5 * x[t - 1]


# ---------------------------------------------------------------------------
# 2. The exercises: each one's inputs, reference, and the trap it plants
# ---------------------------------------------------------------------------

def random_input(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator(device="cpu").manual_seed(seed), device="cpu").to(DEVICE)


def one_input():
    return (random_input(3, 5, seed=20),)


def two_inputs():
    return (random_input(3, 5, seed=20), random_input(3, 5, seed=21))


def rows_and_weights():
    return random_input(3, 5, seed=20), random_input(5, seed=26)  # x (rows, columns), one weight a column


def logits_input():
    return (random_input(4, 7, seed=22),)  # (rows, classes)


def sequence_input():
    return (random_input(6, 4, seed=23),)  # (time steps, channels)


def logits_and_targets():
    targets = torch.randint(0, 7, (4,), generator=torch.Generator().manual_seed(25)).to(DEVICE)
    return random_input(4, 7, seed=24), targets


def gelu_reference(x):
    return torch.nn.functional.gelu(x, approximate="none")


def causal_conv_reference(x):
    return x + CAUSAL_TAP * torch.nn.functional.pad(x[:-1], (0, 0, 1, 0))


@dataclasses.dataclass
class Exercise:
    number: int
    name: str               # the torch.autograd.Function's name, in exercises.py and in solutions.py
    reference: object       # the same op in differentiable torch ops
    planted: str            # the trap the unsolved version has ("crashes" where the backward is not written yet)
    inputs: object = one_input  # a function returning the op's arguments
    second_order: bool = False
    # Notes that count against a solution: legal code PyTorch accepts, but not what the exercise asks
    # (exercise 8 asks backward to skip the gradients nobody needs).
    forbidden_notes: tuple = ()


EXERCISES = [
    Exercise(1, "GELUNoChainRule", gelu_reference, "ignores grad_output"),
    Exercise(2, "GELUFirstElement", gelu_reference, "assumes a uniform grad_output"),
    Exercise(3, "GELUSharedDerivative", gelu_reference, "keeps state between calls"),
    Exercise(4, "GELUInPlace", gelu_reference, "mutates grad_output in place"),
    Exercise(5, "GELURawLaunch", gelu_reference, "assumes grad_output is laid out like its input"),
    Exercise(6, "ScaleColumns", lambda x, w: x * w, "returns the wrong gradients", inputs=rows_and_weights),
    Exercise(7, "GELUAsPrinted", gelu_reference, "a silently wrong second derivative", second_order=True),
    Exercise(8, "TritonMul", lambda x, y: x * y, "crashes", inputs=two_inputs, forbidden_notes=(WASTED_GRADIENT,)),
    Exercise(9, "TritonSiLU", torch.nn.functional.silu, "crashes"),
    Exercise(10, "RowLogSumExp", lambda x: torch.logsumexp(x, dim=1), "assumes a uniform grad_output",
             inputs=logits_input),
    Exercise(11, "CausalConv", causal_conv_reference, "assumes a contiguous grad_output", inputs=sequence_input),
    Exercise(12, "CrossEntropyInPlace", lambda logits, targets: torch.nn.functional.cross_entropy(logits, targets),
             "writes into an input or a saved tensor", inputs=logits_and_targets),
]


# ---------------------------------------------------------------------------
# 3. Grading: the checker's report, a hint, a score
# ---------------------------------------------------------------------------

def grade(exercise, module):
    """The checker's report on module's version of exercise (module: anything with the Functions as attributes)."""
    return check_backward(getattr(module, exercise.name), *exercise.inputs(), reference=exercise.reference,
                          second_order=exercise.second_order, name=f"{exercise.number}. {exercise.name}")


def is_solved(exercise, report):
    """No trap, and none of the notes the exercise forbids."""
    return report.clean and not any(report.noted(kind) for kind in exercise.forbidden_notes)


def hint(exercise, report):
    """One line for an unsolved exercise: the trap the checker still finds, in the chapter's words, or the
    note the exercise forbids."""
    if report.clean:
        kind = next(k for k in exercise.forbidden_notes if report.noted(k))
        return f"that it {kind}: return None where ctx.needs_input_grad is False"
    trap = report.traps[0]
    if trap == CRASHES.name and report.findings[0].error == "NotImplementedError":
        return f'"{trap}": its backward is not written yet'
    return f'"{trap}"' + (f" (and {len(report.traps) - 1} more)" if len(report.traps) > 1 else "")


def score(module, exercises=EXERCISES, details=False):
    """Grades each exercise of module, prints one line for each (solved, or a hint), then "K of N solved".
    details: also print the checker's whole report of each unsolved one. Returns K."""
    solved = 0
    for exercise in exercises:
        report = grade(exercise, module)
        label = f"{exercise.number}. {exercise.name}"
        if is_solved(exercise, report):
            solved += 1
            print(f"  solved   {label}")
        else:
            print(f"  not yet  {label}. Hint: the checker still finds {hint(exercise, report)}")
            if details:
                print("\n".join("           " + line for line in str(report).splitlines()))
    print(f"{solved} of {len(exercises)} solved")
    return solved


# ---------------------------------------------------------------------------
# 4. The command line of exercises.py and solutions.py
# ---------------------------------------------------------------------------

class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"{self.prog}: {message} (see --help)\n")


def parse_arguments(argv, program, description, solutions_flag):
    """The chosen exercises and the parsed arguments; a usage error exits 2 with one line."""
    parser = OneLineParser(prog=program, description=description)
    if solutions_flag:
        parser.add_argument("--solutions", action="store_true", help="grade practice/solutions.py instead")
    parser.add_argument("--only", type=int, action="append", metavar="N",
                        help="grade only exercise N, with the checker's whole report (repeatable)")
    args = parser.parse_args(argv)
    numbers = [e.number for e in EXERCISES]
    unknown = [n for n in args.only or () if n not in numbers]
    if unknown:
        parser.error(f"no exercise numbered {', '.join(map(str, unknown))}: they are 1 to {len(EXERCISES)}")
    chosen = [e for e in EXERCISES if not args.only or e.number in args.only]
    return chosen, args


def command_line(module, chosen, details):
    """Exit status of a grading run: 0 when every chosen exercise is solved, else 1."""
    return 0 if score(module, chosen, details=details) == len(chosen) else 1


def leave(status):
    """sys.exit(status), without tearing the interpreter down: autograd's device threads, which call into the Python
    backwards graded here, can abort the process during that teardown (pytorch/pytorch#38228; seen on an H100:
    "terminate called without an active exception", exit -6, after the score was printed)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
