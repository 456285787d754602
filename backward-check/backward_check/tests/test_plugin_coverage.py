"""A suite shaped like a library author's: the defaults reach the ops first called in its last file.

Three ops in the first two files, each called by a test parametrized over a dozen values of a mode argument
(every value a new signature, each checked after its test), and correct; their forwards take 20 ms (a kernel's
launch and a sync, say), so a check of one takes seconds and their new values alone would spend the default
budget. The last file first calls two more ops, each with a planted bug. Before the schedule kept a reserve for ops
called late, the early values spent the budget and the last file's ops were never checked: a library author saw
"past the time budget" in two rows and no bug. Now the defaults name both bugs, plain and under pytest-xdist's
`-n 2`, and no op goes unchecked.
"""
import pytest
from backward_check.tests.plugin_runs import row, run_pytest

EARLY_OPS = '''
import time

import torch


def slow():
    time.sleep(0.02)  # a launch and a sync: what makes a real op's check take seconds


class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, mode):
        slow()
        ctx.factor = {"a": 1.0, "b": 2.0}.get(mode[:1], 3.0)
        return x * ctx.factor

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * ctx.factor, None


class Shift(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, mode):
        slow()
        return x + len(mode)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output, None


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, mode):
        slow()
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return 2 * x * grad_output, None
'''

LATE_OPS = '''
import torch


class LateIgnoresGradOutput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.exp()

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return x.exp()  # the bug: the local derivative alone


class LateUniform(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return 3 * x

    @staticmethod
    def backward(ctx, grad_output):
        return 3 * grad_output.reshape(-1)[0] * torch.ones_like(grad_output)  # the bug: one element's grad_output
'''

MODES = [f"mode{k}" for k in range(12)]

EARLY_TESTS = '''
import pytest
import torch

from early_ops import {ops}

MODES = {modes!r}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op", [{ops}])
def test_op(op, mode):
    x = torch.randn(3, 4, requires_grad=True)
    op.apply(x, mode).sum().backward()
    assert x.grad is not None
'''

LATE_TESTS = '''
import torch

from late_ops import LateIgnoresGradOutput, LateUniform


def test_late_exp():
    x = torch.randn(3, 4, requires_grad=True)
    LateIgnoresGradOutput.apply(x).sum().backward()


def test_late_scale():
    x = torch.randn(3, 4, requires_grad=True)
    LateUniform.apply(x).sum().backward()
'''


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    folder = tmp_path_factory.mktemp("coverage")
    (folder / "early_ops.py").write_text(EARLY_OPS)
    (folder / "late_ops.py").write_text(LATE_OPS)
    (folder / "test_a_early.py").write_text(EARLY_TESTS.format(ops="Scale, Shift", modes=MODES))
    (folder / "test_b_early.py").write_text(EARLY_TESTS.format(ops="Square", modes=MODES))
    (folder / "test_c_late.py").write_text(LATE_TESTS)
    return folder


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["plain", "xdist2"])
def test_the_defaults_name_the_bugs_of_the_ops_first_called_last(suite, workers):
    code, output = run_pytest(suite, *workers, "--backward-check", timeout=900)
    assert code == 0 and "38 passed" in output, output[-3000:]
    exp, = row(output, "late_ops.LateIgnoresGradOutput")
    assert exp.rstrip().endswith("TRAP ignores grad_output"), exp
    uniform, = row(output, "late_ops.LateUniform")
    assert "TRAP assumes a uniform grad_output" in uniform, uniform
    assert "never checked" not in output, output[-3000:]
    # the early ops' first calls were checked too, and their new values within the budget, not all of them
    for op in ("early_ops.Scale", "early_ops.Shift", "early_ops.Square"):
        assert row(output, op), output[-3000:]
