"""practice/: the backward checker against a zoo of planted bugs (each must be named) and of
correct ops (none may be flagged), the exercises and their solutions, and the self-check script.

Every check the checker makes drives the backward with a non-uniform grad_output, random,
non-contiguous and shared with a sibling; here the zoo makes sure each trap is told apart.
"""
import math
import subprocess
import sys
import textwrap

import pytest
import torch
from chapter_scripts import DEVICE, REPO, SCRIPTS, hardened_ops, scripts_defining, seeded_randn

sys.path.insert(0, str(REPO / "practice"))
import backward_checker  # noqa: E402
import exercises  # noqa: E402
import solutions  # noqa: E402
from backward_checker import check_backward  # noqa: E402

gelu = exercises.gelu_reference
dgelu = exercises.gelu_local_derivative


def function(forward, backward, name):
    """A one-input autograd.Function from two plain functions: forward(x) and backward(ctx_x, grad_output)."""
    def fwd(ctx, x):
        ctx.save_for_backward(x)
        return forward(x)

    def bwd(ctx, grad_output):
        x, = ctx.saved_tensors
        return backward(x, grad_output)

    return type(name, (torch.autograd.Function,), {"forward": staticmethod(fwd), "backward": staticmethod(bwd)})


def triton_gelu(x):
    return hardened_ops.launch_forward(hardened_ops.gelu_forward_kernel, x)


class CountsItsUses(torch.autograd.Function):
    """Divides by how many times forward ran: 'each use gets its share'."""
    uses = 0

    @staticmethod
    def forward(ctx, x):
        CountsItsUses.uses += 1
        ctx.save_for_backward(x)
        return triton_gelu(x)

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        share = grad_output * dgelu(x) / CountsItsUses.uses
        CountsItsUses.uses = 0
        return share


class TwoGradientsForOne(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return 2 * x * grad_output, None


class MulIgnoresNeedsInputGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, grad_output):
        x, y = ctx.saved_tensors
        return grad_output * y, grad_output * x


def raw_square_backward(x, grad_output):
    """The chapter's square kernel launched on grad_output as it came (no .contiguous())."""
    grad_input = torch.empty_like(x)
    n = x.numel()
    import triton
    hardened_ops.square_backward_kernel[(triton.cdiv(n, 1024),)](grad_output, x, grad_input, n, BLOCK=1024)
    return grad_input


# (the op, its reference, the trap that must be named, how many inputs)
PLANTED = {
    "no chain rule": (hardened_ops.TritonGELUBuggy, gelu, "ignores grad_output", 1),
    "square, no chain rule": (function(lambda x: x * x, lambda x, g: 2 * x, "SquareNoChainRule"),
                              lambda x: x * x, "ignores grad_output", 1),
    "grad_output[0]": (exercises.GELUFirstElement, gelu, "assumes a uniform grad_output", 1),
    "grad_output.mean()": (function(triton_gelu, lambda x, g: g.mean() * dgelu(x), "GELUMean"), gelu,
                           "assumes a uniform grad_output", 1),
    "derivative kept on the class": (exercises.GELUSharedDerivative, gelu, "assumes a single use", 1),
    "divides by its uses": (CountsItsUses, gelu, "assumes a single use", 1),
    "mul_ on grad_output": (exercises.GELUInPlace, gelu, "mutates grad_output in place", 1),
    "add_ on grad_output": (function(lambda x: x * x, lambda x, g: g.add_(0).mul_(2 * x), "SquareInPlace"),
                            lambda x: x * x, "mutates grad_output in place", 1),
    "raw GELU launch": (exercises.GELURawLaunch, gelu, "assumes a contiguous grad_output", 1),
    "raw square launch": (function(lambda x: x * x, raw_square_backward, "SquareRawLaunch"), lambda x: x * x,
                          "assumes a contiguous grad_output", 1),
    "float64 gradient": (exercises.SquareInFloat64, lambda x: x * x, "returns the wrong gradients", 1),
    "two gradients for one input": (TwoGradientsForOne, lambda x: x * x, "returns the wrong gradients", 1),
    "a gradient nobody needs": (MulIgnoresNeedsInputGrad, lambda x, y: x * y, "returns the wrong gradients", 2),
    "tanh-approximate derivative": (function(triton_gelu, lambda x, g: g * torch.ops.aten.gelu_backward(
        torch.ones_like(x), x, approximate="tanh"), "GELUTanhDerivative"), gelu, "a wrong formula", 1),
    "sign error": (function(torch.sin, lambda x, g: -g * torch.cos(x), "SinSignError"), torch.sin, "a wrong formula", 1),
}


def inputs(count, seed=30):
    return tuple(seeded_randn(3, 5, seed=seed + i) for i in range(count))


@pytest.mark.parametrize("case", list(PLANTED))
def test_a_planted_bug_is_named(case):
    op, reference, trap, count = PLANTED[case]
    report = check_backward(op, *inputs(count), reference=reference)
    assert report.traps == [trap], str(report)


@pytest.mark.parametrize("case", ["no chain rule", "grad_output[0]", "mul_ on grad_output", "raw GELU launch"])
def test_a_planted_bug_is_named_without_a_reference(case):
    """Finite differences in float64 stand in for the reference, as in torch.autograd.gradcheck."""
    op, _, trap, count = PLANTED[case]
    assert check_backward(op, *inputs(count)).traps == [trap]


def test_a_silently_wrong_second_derivative_is_named_only_when_asked():
    listing_style = exercises.GELUAsPrinted
    assert check_backward(listing_style, *inputs(1), reference=gelu).clean
    report = check_backward(listing_style, *inputs(1), reference=gelu, second_order=True)
    assert report.traps == ["a silently wrong second derivative"], str(report)


class SinDifferentiable(torch.autograd.Function):
    """A Function wrapping torch ops whose backward is itself differentiable."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output * torch.cos(x)


class MulHonouringNeeds(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, grad_output):
        x, y = ctx.saved_tensors
        return (grad_output * y if ctx.needs_input_grad[0] else None,
                grad_output * x if ctx.needs_input_grad[1] else None)


def chapter_cases():
    """Every script's TritonGELU and TritonSquare, as the book prints them (plus the lines a GPU needs)."""
    return [pytest.param(getattr(p.values[0], name), ref, id=f"{p.id}-{name}")
            for name, ref in (("TritonGELU", gelu), ("TritonSquare", lambda x: x * x))
            for p in scripts_defining(name)]


CORRECT = [pytest.param(hardened_ops.TritonGELU, gelu, id="hardened_ops-TritonGELU"),
           pytest.param(hardened_ops.TritonSquare, lambda x: x * x, id="hardened_ops-TritonSquare"),
           pytest.param(SinDifferentiable, torch.sin, id="torch-sin"),
           pytest.param(torch.tanh, None, id="plain-callable-tanh"),
           pytest.param(lambda x: hardened_ops.TritonGELU.apply(x) * 3.0, None, id="a-function-of-tensors")]


@pytest.mark.parametrize("op, reference", chapter_cases() + CORRECT)
def test_a_correct_op_gets_a_clean_report(op, reference):
    report = check_backward(op, *inputs(1), reference=reference)
    assert report.clean, str(report)


def test_a_correct_two_input_op_gets_a_clean_report():
    assert check_backward(MulHonouringNeeds, *inputs(2), reference=lambda x, y: x * y).clean


@pytest.mark.parametrize("op, reference", [CORRECT[0], CORRECT[1], CORRECT[2]])
def test_a_refused_or_right_double_backward_is_clean(op, reference):
    report = check_backward(op, *inputs(1), reference=reference, second_order=True)
    assert report.clean and "create_graph=True" in report.passed, str(report)


def test_the_report_is_short_and_names_the_section():
    text = str(check_backward(exercises.GELUFirstElement, *inputs(1), reference=gelu))
    assert len(text.splitlines()) <= 4 and "[17.1 and 17.3" in text and "grad_output[0]" in text


def test_bad_input_is_refused_with_a_message():
    with pytest.raises(TypeError, match="inputs as tensors"):
        check_backward(hardened_ops.TritonGELU, [1.0, 2.0])
    with pytest.raises(ValueError, match="floating-point input"):
        check_backward(hardened_ops.TritonGELU, torch.arange(4).to(DEVICE))


# --- exercises and solutions ---------------------------------------------------

# (moved to tests/test_exercises.py)


def run(*args, cwd=REPO):
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, timeout=600, cwd=cwd)


# --- the command line on a file --------------------------------------------------

def test_the_checker_command_exits_1_on_a_trap_and_0_when_clean(tmp_path):
    module = tmp_path / "my_ops.py"
    module.write_text(textwrap.dedent('''
        import torch

        class Good(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return torch.exp(x)

            @staticmethod
            def backward(ctx, grad_output):
                x, = ctx.saved_tensors
                return grad_output * torch.exp(x)

        class Uniform(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return torch.exp(x)

            @staticmethod
            def backward(ctx, grad_output):
                x, = ctx.saved_tensors
                return grad_output.mean() * torch.exp(x)
    '''))
    clean = run(REPO / "practice/backward_checker.py", module, "--function", "Good")
    assert clean.returncode == 0 and "check_backward(Good): clean" in clean.stdout, clean.stdout + clean.stderr
    trapped = run(REPO / "practice/backward_checker.py", module)
    assert trapped.returncode == 1 and "assumes a uniform grad_output" in trapped.stdout
    missing = run(REPO / "practice/backward_checker.py", module, "--function", "Nope")
    assert missing.returncode == 2 and "defines no Function named ['Nope']" in missing.stderr
    assert run(REPO / "practice/backward_checker.py", tmp_path / "none.py").returncode == 2


# --- the self-check questions ----------------------------------------------------

# (moved to tests/test_exercises.py)


def test_fd_reference_agrees_with_autograd_on_a_smooth_op():
    x = seeded_randn(2, 3, seed=50)
    g = seeded_randn(2, 3, seed=51)
    fd, = backward_checker.finite_difference_vjp(torch.sin, (x,), g)
    torch.testing.assert_close(fd.float(), g * torch.cos(x), atol=1e-6, rtol=1e-6)
    assert math.isfinite(fd.abs().max().item())
