"""A list of tensors that takes no gradient, passed to an op as one argument (torchkbnufft's interpolation tables).

torchkbnufft 1.5.2's two interpolation Functions take `tables`, a list of complex tensors that never require grad.
Before, the checker refused any argument holding a list of tensors, and the plugin's table said "not checked" on
every call of them. Now such a list is passed to every call as it is: a constant the checker never varies (as it
never varies an integer argument). A list that holds a tensor wanting a gradient is still refused, with why: the
checker cannot take a gradient through it. Each right op is clean at several shapes and seeds, gradcheck agreeing;
each planted bug is named by its trap.
"""
import pytest
import torch
from backward_check.tests.plugin_runs import row, run_pytest

from backward_check import UsageError, check_backward


class Tabled(torch.autograd.Function):
    """x * tables[0] + tables[1], the tables a list: the gradient is grad_output * tables[0]."""
    @staticmethod
    def forward(ctx, x, tables):
        scale, shift = tables
        ctx.save_for_backward(scale)
        return x * scale + shift

    @staticmethod
    def backward(ctx, grad_output):
        scale, = ctx.saved_tensors
        return grad_output * scale, None


class TabledIgnoresTheTable(Tabled):
    """The planted bug: the table's scale forgotten in the backward."""
    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.clone(), None


class TabledUniform(Tabled):
    """Reads one element of grad_output for all: right under .sum(), wrong under any other loss."""
    @staticmethod
    def backward(ctx, grad_output):
        scale, = ctx.saved_tensors
        return grad_output.flatten()[0] * scale, None


class ComplexTabled(torch.autograd.Function):
    """z * tables[0] over complex numbers, as torchkbnufft's tables are: the gradient is grad_output * conj."""
    @staticmethod
    def forward(ctx, z, tables):
        ctx.save_for_backward(tables[0])
        return z * tables[0]

    @staticmethod
    def backward(ctx, grad_output):
        w, = ctx.saved_tensors
        return grad_output * w.conj(), None


class ComplexTabledWithoutConjugate(ComplexTabled):
    @staticmethod
    def backward(ctx, grad_output):
        w, = ctx.saved_tensors
        return grad_output * w, None


def tables_for(shape, dtype, seed):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=generator, dtype=dtype) + 2, torch.randn(shape, generator=generator,
                                                                                  dtype=dtype)]


@pytest.mark.parametrize("shape", [(5,), (4, 3), (2, 40, 9)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_right_op_taking_a_list_of_tables_is_clean(shape, dtype, seed):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed + 10), dtype=dtype, requires_grad=True)
    tables = tables_for(shape, dtype, seed)
    report = check_backward(Tabled, x, tables)
    assert report.traps == [] and not report.undecided, report
    assert [t.requires_grad for t in tables] == [False, False]  # the caller's tables as they were
    x64 = x.detach().double().requires_grad_()
    assert torch.autograd.gradcheck(Tabled.apply, (x64, [t.double() for t in tables]))


@pytest.mark.parametrize("op, trap", [(TabledIgnoresTheTable, "a wrong formula"),
                                      (TabledUniform, "assumes a uniform grad_output")])
@pytest.mark.parametrize("shape", [(4, 3), (2, 40, 9)])
def test_a_bug_beside_a_list_of_tables_is_named(op, trap, shape):
    x = torch.randn(shape, requires_grad=True)
    assert trap in check_backward(op, x, tables_for(shape, torch.float32, 3)).traps


@pytest.mark.parametrize("shape", [(6,), (3, 5)])
def test_complex_tables_in_a_list(shape):
    z = torch.randn(shape, dtype=torch.complex128, requires_grad=True)
    tables = [torch.randn(shape, dtype=torch.complex128)]
    assert check_backward(ComplexTabled, z, tables).traps == []
    assert check_backward(ComplexTabledWithoutConjugate, z, tables).traps == ["a wrong formula"]


def test_a_list_holding_a_tensor_that_wants_a_gradient_is_refused_with_why():
    x = torch.randn(4, 3, requires_grad=True)
    tables = [torch.randn(4, 3, requires_grad=True), torch.randn(4, 3)]
    with pytest.raises(UsageError, match=r"\['tables'\] hold a list of tensors of which one requires grad.*one by "
                                         r"one"):
        check_backward(Tabled, x, tables)


class PopsItsTable(Tabled):
    """Takes its table from the list (a forward may, as a caller's list is built for one call): right (Tabled's
    backward)."""
    @staticmethod
    def forward(ctx, x, tables):
        scale = tables.pop(0)
        ctx.save_for_backward(scale)
        return x * scale


class CountsInItsTable(Tabled):
    """Right, but counts its calls in a tensor of the list: the caller's tensor must come back as it was."""
    @staticmethod
    def forward(ctx, x, tables):
        tables[1].add_(1.0)
        return Tabled.forward(ctx, x, tables)


def test_each_call_gets_its_own_list_and_the_callers_tensors_are_left_alone():
    """The checker hands every call a list made afresh: a forward that pops from it is right on every call (the
    same list for all was empty by the second: 'crashes'), and one that writes into a tensor in it leaves the
    caller's tensor as it was (it had counted every call the checker made)."""
    x = torch.randn(4, 3, requires_grad=True)
    assert check_backward(PopsItsTable, x, [torch.rand(4, 3) + 1]).traps == []
    tables = tables_for((4, 3), torch.float32, 5)
    before = [t.clone() for t in tables]
    check_backward(CountsInItsTable, x, tables)
    assert all(torch.equal(t, b) for t, b in zip(tables, before))


class Projects(torch.autograd.Function):
    """x @ tables[0]: the table fixes x's last size."""
    @staticmethod
    def forward(ctx, x, tables):
        ctx.save_for_backward(tables[0])
        return x @ tables[0]

    @staticmethod
    def backward(ctx, grad_output):
        w, = ctx.saved_tensors
        return grad_output @ w.t(), None


def test_a_list_of_float32_tables_is_differenced_in_float64_and_pins_its_sizes():
    """The reference and finite differences see the tables in float64, as they see every other tensor; and the
    input grows only along the sizes no table has (before, the checker grew x's last size, and the op refused)."""
    x = torch.randn(4, 6, requires_grad=True)
    tables = [torch.randn(6, 3)]
    with_reference = check_backward(Projects, x, tables, reference=lambda x, tables: x @ tables[0])
    assert with_reference.traps == [] and with_reference.checked.endswith("against the reference, in float64"), \
        with_reference.checked
    assert "grown to (" in with_reference.checked and ", 6)" in with_reference.checked.split("grown to")[1]
    assert check_backward(Projects, x, tables).traps == []


def test_a_namedtuple_of_tables_goes_where_the_ops_tensors_go():
    import collections

    from backward_check.calling import Op
    Tables = collections.namedtuple("Tables", "scale shift")
    x, scale = torch.randn(3, requires_grad=True), torch.randn(3)
    for tables in ([scale], (scale,), Tables(scale, scale)):
        op = Op(lambda x, t: x * t[0], (x, tables), {}, device=torch.device("meta"))
        assert type(op.values[1]) is type(tables) and op.values[1][0].device.type == "meta", tables


TABLED_SUITE = """
import torch


class Tabled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, tables):
        ctx.save_for_backward(tables[0])
        return x * tables[0] + tables[1]

    @staticmethod
    def backward(ctx, grad_output):
        scale, = ctx.saved_tensors
        return grad_output * scale, None


class ForgetsTheTable(Tabled):
    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.clone(), None


def test_tabled():
    x = torch.randn(4, 3, requires_grad=True)
    Tabled.apply(x, [torch.rand(4, 3) + 1, torch.randn(4, 3)]).sum().backward()


def test_forgets():
    x = torch.randn(4, 3, requires_grad=True)
    ForgetsTheTable.apply(x, [torch.rand(4, 3) + 1, torch.randn(4, 3)]).sum().backward()
"""


def test_the_plugin_checks_an_op_called_with_a_list_of_tables(tmp_path):
    """Before, both rows said 'not checked: ... hold a list of tensors'; now both are checked, and the bug named."""
    (tmp_path / "test_tabled_op.py").write_text(TABLED_SUITE)
    status, output = run_pytest(tmp_path, "--backward-check")
    assert status == 0, output  # the defaults report a trap; they fail no test
    assert row(output, "test_tabled_op.Tabled")[0].endswith("clean"), output
    assert "TRAP a wrong formula" in row(output, "test_tabled_op.ForgetsTheTable")[0], output
