"""The compile check's zoo (check_backward(..., compile=...)): what torch.compile must leave alone, and what it gets
wrong on purpose.

- WRONG_BACKEND: a Dynamo backend that compiles the forward as it is and scales the first gradient of the backward
  graph by 1.5: a compiler that changes a backward, which the checker must name on every legal op.
- PUBLIC: the public PyTorch issues in which torch.compile changes a correct Function's gradient, written as
  Functions that are right eagerly. Each names its issue; the verdict depends on the torch: named where the issue
  affects it, clean where it is fixed (backward_check.checks.compiled.KNOWN_ISSUES says which torch each was measured in).
- CUSTOM_OPS: torch.library custom ops, legal and planted, for opcheck's checks and the compiled backward.
- TRITON_OPS: the chapter's kernels called directly (hardened_ops.TritonGELU) and through torch.library.triton_op
  (extras/triton_op.py): clean on a GPU; on the CPU, Triton's interpreter cannot be traced, and the check says so.

Every case is (the op, its arguments, its keyword arguments, its reference), drawn from a seed, as in the other zoos.
"""
import torch
from chapter_scripts import hardened_ops, load_extra, seeded_randn
from checker_zoo import gelu, x35

from compile_backends import scaling_backend

from backward_check.checks.compiled import IN_PLACE_IN_FORWARD, KNOWN_ISSUES, SAME_TENSOR_TWICE, torch_version

COMPILED = "wrong under torch.compile"


def pytorchs_own(finding):
    """Whether a finding is PyTorch's own, as a library author accepts one: wrong under torch.compile, and put down to
    one public issue that affects this torch (the same tensor passed twice, or an in-place op in the forward)."""
    return finding.trap.name == COMPILED and any(
        f"has this known issue: pytorch/pytorch#{issue.number}" in finding.evidence
        for issue in KNOWN_ISSUES if issue.affects(torch_version()))


def unexplained(report):
    """The report's findings (one a trap), less PyTorch's own: on torch 2.11 a legal Function of two inputs of one
    shape is rightly named for pytorch/pytorch#183604."""
    return [f for f in report.findings if not pytorchs_own(f)]


# -- a compiler that changes the backward ----------------------------------------------------------------------------

WRONG_BACKEND = scaling_backend()


# -- the public issues -------------------------------------------------------------------------------------------------

class SameTensorTwice(torch.autograd.Function):
    """pytorch/pytorch#183604's Function: a * b + a + b. Right eagerly; torch 2.11 compiled, F(x, x) gets half of x's
    gradient (each input's contribution is routed to one deduplicated input)."""
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b + a + b

    @staticmethod
    def backward(ctx, grad_output):
        a, b = ctx.saved_tensors
        return grad_output * (b + 1), grad_output * (a + 1)  # d/da = b + 1, d/db = a + 1


class InPlaceInForward(torch.autograd.Function):
    """pytorch/pytorch#180642's class: an in-place op inside forward (here y += 1), x scaled by a row w. Right
    eagerly; torch 2.11 compiled, the gradient reaches the wrong output slot. Its inputs are of two shapes, so the
    same tensor cannot be passed as both (#183604 is the other case's)."""
    @staticmethod
    def forward(ctx, x, w):
        y = x * w
        y += 1
        ctx.save_for_backward(x, w)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        x, w = ctx.saved_tensors
        return grad_output * w, (grad_output * x).sum(dim=0)  # d(xw + 1)/dx = w, d/dw = x summed over the rows


class CancelsInBfloat16(torch.autograd.Function):
    """(1.01 x)^2 - x^2, computed as written: in bfloat16 eager rounds each square, and the two cancel to a result
    30% off; Inductor keeps the squares in float32 and is nearer the exact 0.0201 x^2. More precise is not wrong."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x * 1.01) ** 2 - x ** 2

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output * (2 * 1.01 * (x * 1.01) - 2 * x)


class CancelsRefusingFloat64(CancelsInBfloat16):
    """The same, with a kernel that has no float64 path: its own rounding is measured against float32 copies."""
    @staticmethod
    def forward(ctx, x):
        if x.dtype == torch.float64:
            raise TypeError("no float64 kernel")
        return CancelsInBfloat16.forward(ctx, x)


PUBLIC = {
    "the same tensor passed as two inputs (pytorch/pytorch#183604)": (
        SameTensorTwice, (x35(), x35(31)), {}, lambda a, b: a * b + a + b, SAME_TENSOR_TWICE),
    "an in-place op inside forward (pytorch/pytorch#180642)": (
        InPlaceInForward, (x35(), seeded_randn(5, seed=92)), {}, lambda x, w: x * w + 1, IN_PLACE_IN_FORWARD),
}


# -- torch.library custom ops --------------------------------------------------------------------------------------------

@torch.library.custom_op("backward_check_compile_zoo::scaled_tanh", mutates_args=())
def scaled_tanh(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.tanh(x) * scale


@scaled_tanh.register_fake
def _(x, scale):
    return torch.empty_like(x)


def scaled_tanh_setup(ctx, inputs, output):
    x, scale = inputs
    ctx.save_for_backward(x)
    ctx.scale = scale


def scaled_tanh_backward(ctx, grad_output):
    x, = ctx.saved_tensors
    return grad_output * ctx.scale * (1 - torch.tanh(x) ** 2), None  # d tanh = 1 - tanh^2


scaled_tanh.register_autograd(scaled_tanh_backward, setup_context=scaled_tanh_setup)


@torch.library.custom_op("backward_check_compile_zoo::tanh_no_fake", mutates_args=())
def tanh_without_fake(x: torch.Tensor) -> torch.Tensor:
    """No register_fake: torch.compile cannot trace it (opcheck's test_faketensor says so)."""
    return torch.tanh(x)


def tanh_backward(ctx, grad_output):
    x, = ctx.saved_tensors
    return grad_output * (1 - torch.tanh(x) ** 2)


def save_x(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


tanh_without_fake.register_autograd(tanh_backward, setup_context=save_x)


@torch.library.custom_op("backward_check_compile_zoo::tanh_wrong_fake", mutates_args=())
def tanh_wrong_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x)


@tanh_wrong_fake.register_fake
def _(x):
    return x.new_empty(x.shape[:-1])  # BUG: the real op keeps the last dimension


tanh_wrong_fake.register_autograd(tanh_backward, setup_context=save_x)


def tanh_reference(x):
    return torch.tanh(x)


CUSTOM_OPS_LEGAL = {
    "a custom op with register_fake and register_autograd": (scaled_tanh, (x35(), 0.5), {},
                                                             lambda x, scale: torch.tanh(x) * scale),
    "a custom op in bfloat16": (scaled_tanh, (x35(dtype=torch.bfloat16), 2.0), {}, lambda x, scale: torch.tanh(x) * scale),
}

CUSTOM_OPS_PLANTED = {
    "no fake implementation (register_fake)": (tanh_without_fake, (x35(),), {}, tanh_reference, "test_faketensor"),
    "a fake implementation of the wrong shape": (tanh_wrong_fake, (x35(),), {}, tanh_reference, "test_faketensor"),
}


# -- Triton kernels ------------------------------------------------------------------------------------------------------------

def triton_op_module():
    """extras/triton_op.py, which registers the chapter's kernels as torch.library.triton_op operators (torch 2.6 and
    later); None where this torch has no triton_op."""
    if not hasattr(torch.library, "triton_op"):
        return None
    return load_extra("triton_op")  # the module test_extras.py loads: its operators registered once per process


def triton_ops():
    module = triton_op_module()
    cases = {"hardened TritonGELU (Triton kernels called directly)": (hardened_ops.TritonGELU,
                                                                       (seeded_randn(4, 300, seed=90),), {}, gelu)}
    if module is not None:
        cases["chapter17::gelu (torch.library.triton_op)"] = (module.gelu, (seeded_randn(4, 300, seed=91),), {}, gelu)
    return cases


TRITON_OPS = triton_ops()
