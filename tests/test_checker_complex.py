"""Complex inputs and outputs (issue 56's class 4: an NUFFT library's Functions take complex inputs that require grad).

The checker checks a complex tensor through its real and imaginary parts, which holds it to PyTorch's convention for
complex gradients (the gradient of a real loss is dL/d(real z) + i dL/d(imag z), the conjugate Wirtinger derivative
that torch.autograd.gradcheck checks). Each right op below is clean, and gradcheck agrees; each planted bug is named,
with its trap, and gradcheck agrees that it is wrong. Before, check_backward refused every complex input with a usage
error, and the plugin's table said so.
"""
import pytest
import torch
from backward_check.tests.plugin_runs import row, run_pytest

from backward_check import check_backward
from backward_check.report import COMPLEX_PARTS


class Scale(torch.autograd.Function):
    """z * w, w a fixed complex table: the gradient is grad_output * conj(w)."""
    @staticmethod
    def forward(ctx, z, w):
        ctx.save_for_backward(w)
        return z * w

    @staticmethod
    def backward(ctx, grad_output):
        w, = ctx.saved_tensors
        return grad_output * w.conj(), None


class ScaleWithoutConjugate(Scale):
    """The complex bug: the holomorphic derivative w where PyTorch's convention takes its conjugate."""
    @staticmethod
    def backward(ctx, grad_output):
        w, = ctx.saved_tensors
        return grad_output * w, None


class ScaleUniform(Scale):
    """Reads one element of grad_output for all: right under .sum(), wrong under any other loss."""
    @staticmethod
    def backward(ctx, grad_output):
        w, = ctx.saved_tensors
        return grad_output.flatten()[0] * w.conj(), None


class SquaredModulus(torch.autograd.Function):
    """|z|^2, a real output of a complex input: the gradient is 2 * grad_output * z."""
    @staticmethod
    def forward(ctx, z):
        ctx.save_for_backward(z)
        return (z * z.conj()).real

    @staticmethod
    def backward(ctx, grad_output):
        z, = ctx.saved_tensors
        return 2 * grad_output * z


class SquaredModulusConjugated(SquaredModulus):
    @staticmethod
    def backward(ctx, grad_output):
        z, = ctx.saved_tensors
        return 2 * grad_output * z.conj()


class Phase(torch.autograd.Function):
    """exp(i x), a complex output of a real input: the gradient is real(conj(grad_output) * i exp(i x))."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.polar(torch.ones_like(x), x)

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return (grad_output.conj() * 1j * torch.polar(torch.ones_like(x), x)).real


class PhaseWithoutConjugate(Phase):
    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return (grad_output * 1j * torch.polar(torch.ones_like(x), x)).real


class ScaleInPlace(Scale):
    """Writes the gradient into grad_output, which a sibling reads too."""
    @staticmethod
    def backward(ctx, grad_output):
        w, = ctx.saved_tensors
        return grad_output.mul_(w.conj()), None


def complex_randn(shape, dtype, seed):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=dtype, generator=generator)


def arguments(op, shape, dtype, seed):
    z = complex_randn(shape, dtype, seed)
    if op in (Phase, PhaseWithoutConjugate):
        return (z.real.contiguous(),), {}
    if issubclass(op, SquaredModulus):
        return (z,), {}
    return (z, complex_randn(shape, dtype, seed + 1)), {"no_grad": "w"}


def gradcheck_passes(op, args):
    """torch.autograd.gradcheck's verdict in float64/complex128, the input wanting a gradient first."""
    wide = [a.to(torch.complex128 if a.is_complex() else torch.float64) for a in args]
    wide[0].requires_grad_(True)
    return torch.autograd.gradcheck(op.apply, tuple(wide), raise_exception=False, fast_mode=False)


SHAPES = [(5,), (4, 3), (2, 7, 3)]
DTYPES = [torch.complex64, torch.complex128]


@pytest.mark.parametrize("op", [Scale, SquaredModulus, Phase])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", [0, 1])
def test_a_right_complex_op_is_clean_and_says_how_it_was_checked(op, shape, dtype, seed):
    args, options = arguments(op, shape, dtype, seed)
    report = check_backward(op, *args, **options)
    assert report.clean, str(report)
    assert report.noted(COMPLEX_PARTS), str(report)
    assert gradcheck_passes(op, args)


@pytest.mark.parametrize("op, trap", [(ScaleWithoutConjugate, "a wrong formula"),
                                      (SquaredModulusConjugated, "a wrong formula"),
                                      (PhaseWithoutConjugate, "a wrong formula"),
                                      (ScaleUniform, "assumes a uniform grad_output"),
                                      (ScaleInPlace, "mutates grad_output in place")])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_complex_bug_is_named_by_its_cause(op, trap, shape, dtype):
    args, options = arguments(op, shape, dtype, seed=3)
    report = check_backward(op, *args, **options)
    assert trap in report.traps, str(report)
    if trap == "a wrong formula":  # the convention is gradcheck's: it fails the same backwards
        assert not gradcheck_passes(op, args)


def test_a_reference_in_complex_numbers_is_called_on_complex_numbers():
    z, w = complex_randn((6, 5), torch.complex64, 4), complex_randn((6, 5), torch.complex64, 5)
    reference = lambda z, w: z * w  # noqa: E731
    assert check_backward(Scale, z, w, no_grad="w", reference=reference).clean
    assert check_backward(ScaleWithoutConjugate, z, w, no_grad="w", reference=reference).traps == ["a wrong formula"]


def test_the_parts_dimension_never_grows():
    """The inputs grow past one block along their own dimensions; the parts' last dimension stays 2."""
    report = check_backward(SquaredModulus, complex_randn((4, 3), torch.complex64, 6))
    assert "grown to (" in report.checked and ", 2)" in report.checked.split("grown to")[1], report.checked


class Doubles(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, grad_output):
        return 2 * grad_output


class DoublesWithPartsOfItsOwn(Doubles):
    """An op's own attribute that happens to be called `parts`: the checker's mark of a complex value held as its
    parts is a name of its own, and this one is never read as it (its last dimension would never grow)."""
    parts = ("x",)


def test_an_ops_own_attribute_named_parts_is_not_read_as_the_checkers():
    x = torch.randn(4, 3, requires_grad=True)
    plain, own = check_backward(Doubles, x), check_backward(DoublesWithPartsOfItsOwn, x)
    assert plain.checked == own.checked and ", 2)" not in own.checked.split("grown to")[1], (plain.checked, own.checked)


COMPLEX_SUITE = """
import torch


class ComplexScale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z, w):
        ctx.save_for_backward(w)
        return z * w

    @staticmethod
    def backward(ctx, grad_output):
        w, = ctx.saved_tensors
        return grad_output * w.conj(), None


class ForgetsTheConjugate(ComplexScale):
    @staticmethod
    def backward(ctx, grad_output):
        w, = ctx.saved_tensors
        return grad_output * w, None


def test_complex():
    z = torch.randn(4, 3, dtype=torch.complex64, requires_grad=True)
    ComplexScale.apply(z, torch.randn(4, 3, dtype=torch.complex64)).abs().sum().backward()


def test_conjugate():
    z = torch.randn(4, 3, dtype=torch.complex64, requires_grad=True)
    ForgetsTheConjugate.apply(z, torch.randn(4, 3, dtype=torch.complex64)).abs().sum().backward()
"""


def test_the_plugin_checks_an_op_called_with_complex_inputs(tmp_path):
    """Before, the row said 'not checked' and why; now the op is checked, its complex table (a tensor that did not
    require grad) passed through, and the bug beside it named."""
    (tmp_path / "test_complex_op.py").write_text(COMPLEX_SUITE)
    status, output = run_pytest(tmp_path, "--backward-check")
    assert status == 0, output  # the defaults report a trap; they fail no test
    assert row(output, "test_complex_op.ComplexScale")[0].endswith("clean"), output
    assert "TRAP a wrong formula" in row(output, "test_complex_op.ForgetsTheConjugate")[0], output
