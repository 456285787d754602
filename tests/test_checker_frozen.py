"""Variations no caller makes: the checker freezes each input in turn (requires_grad=False), in the frozen-inputs
check, the writes checks and backward called directly. An op whose callers always pass every input wanting a
gradient (the public function drops frozen parameters before the call) may refuse that: a note, not 'crashes'.
Where frozen_by_callers names the input, a caller does pass it frozen, and the refusal is a crash; an input
frozen and accepted, with the others' gradients wrong, is 'returns the wrong gradients' either way."""
import sys

import pytest
import torch
from chapter_scripts import REPO, seeded_randn

sys.path.insert(0, str(REPO / "practice"))
from backward_check.report import REFUSED_FROZEN  # noqa: E402
from backward_checker import UsageError, check_backward  # noqa: E402


class LinearEveryInputWanted(torch.autograd.Function):
    """x @ w, whose backward assumes both want a gradient (it saves each only for the other's): its library calls
    it only so."""
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x if w.requires_grad else None, w if x.requires_grad else None)
        return x @ w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g @ w.T, x.T @ g


class LinearRefusingFrozenWeight(torch.autograd.Function):
    """x @ w, whose forward refuses a weight that wants no gradient, loudly."""
    @staticmethod
    def forward(ctx, x, w):
        if not w.requires_grad:
            raise ValueError("the weight must want a gradient")
        ctx.save_for_backward(x, w)
        return x @ w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g @ w.T, x.T @ g


class LinearWrongWhenWeightFrozen(torch.autograd.Function):
    """x @ w, whose backward doubles x's gradient when w is frozen: accepted, and wrong."""
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        scale = 1.0 if ctx.needs_input_grad[1] else 2.0  # BUG: another gradient for x when w is frozen
        return scale * (g @ w.T), x.T @ g


@pytest.fixture(autouse=True)
def another_default_device():
    """torch's default device is not the op's (as in test_checker_zoo.py)."""
    with torch.device("meta"):
        yield


def linear(x, w):
    return x @ w


def inputs():
    return seeded_randn(3, 4, seed=20).double(), seeded_randn(4, 5, seed=21).double()


def test_a_frozen_input_no_caller_passes_is_a_note_when_refused():
    report = check_backward(LinearEveryInputWanted, *inputs(), reference=linear, grow=False)
    assert report.clean and report.decided, str(report)
    notes = list(dict.fromkeys(report.noted(REFUSED_FROZEN)))  # one for each input, whichever checks froze it
    assert len(notes) == 2 and notes[0].startswith("refuses `x` frozen") and "AttributeError" in notes[0], notes
    assert {"each input frozen in turn", "writes in the backward", "what backward returns"} <= set(report.passed)


@pytest.mark.parametrize("frozen_by_callers", [["w"], [1], "w"])
def test_a_frozen_input_a_caller_passes_is_a_crash_when_refused(frozen_by_callers):
    report = check_backward(LinearEveryInputWanted, *inputs(), reference=linear, frozen_by_callers=frozen_by_callers,
                            grow=False)
    assert report.traps == ["crashes"] and "`w` frozen" in report.findings[0].evidence, str(report)


def test_a_forward_that_refuses_a_frozen_input_no_caller_passes_is_a_note():
    """The writes checks freeze each input for the forward too: a loud refusal there is a note."""
    report = check_backward(LinearRefusingFrozenWeight, *inputs(), reference=linear, grow=False)
    assert report.clean and any("refuses `w` frozen" in n and "the weight must want a gradient" in n
                                for n in report.noted(REFUSED_FROZEN)), str(report)
    report = check_backward(LinearRefusingFrozenWeight, *inputs(), reference=linear, frozen_by_callers=["w"],
                            grow=False)
    assert report.traps == ["crashes"], str(report)


@pytest.mark.parametrize("frozen_by_callers", [(), ["w"]])
def test_a_frozen_input_accepted_with_wrong_gradients_is_named_either_way(frozen_by_callers):
    report = check_backward(LinearWrongWhenWeightFrozen, *inputs(), reference=linear,
                            frozen_by_callers=frozen_by_callers, grow=False)
    assert report.traps == ["returns the wrong gradients"], str(report)


def test_a_name_frozen_by_callers_that_is_no_argument_is_a_usage_error():
    with pytest.raises(UsageError, match=r"frozen_by_callers names \['weight'\].*it takes \['x', 'w'\]"):
        check_backward(LinearEveryInputWanted, *inputs(), frozen_by_callers=["weight"])
    with pytest.raises(UsageError, match=r"frozen_by_callers names \[2\]"):
        check_backward(LinearEveryInputWanted, *inputs(), frozen_by_callers=[2])
