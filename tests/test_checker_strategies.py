"""The checker's strategies: the grad_outputs it draws are the ones autograd really hands a backward,
grown inputs keep their relations, and a wrong call is refused with a message."""
import sys

import pytest
import torch
from chapter_scripts import DEVICE, REPO, hardened_ops, seeded_randn
from checker_zoo import CrossEntropyPerRow, LeakyScale, MulHonouringNeeds, gelu, logits_and_target

sys.path.insert(0, str(REPO / "practice"))
from backward_check import layouts  # noqa: E402
from backward_check.truth import relative_error  # noqa: E402
from backward_checker import UsageError, check_backward  # noqa: E402


def grad_output_seen(make_loss):
    """The grad_output autograd hands z's producer in make_loss(z), caught by a hook."""
    x = seeded_randn(6, 8, seed=1).requires_grad_(True)
    z = x * 1.0
    seen = {}
    z.register_hook(lambda g: seen.setdefault("g", g))
    make_loss(z).backward()
    return seen["g"]


@pytest.mark.parametrize("label, make_loss", [
    ("after .sum() (all strides 0)", lambda z: 3.0 * z.sum()),
    ("after .sum(dim=0) (stride 0 along dim 0)", lambda z: (z.sum(dim=0) * torch.arange(8.0).to(z.device)).sum()),
    ("after torch.cat(dim=-1) (a narrow view)", lambda z: (torch.cat([z, torch.ones(6, 3, device=z.device)], -1)
                                                          * torch.arange(66.0).reshape(6, 11).to(z.device)).sum()),
    ("after a transpose", lambda z: (z.t() * torch.arange(48.0).reshape(8, 6).to(z.device)).sum()),
])
def test_each_layout_is_the_one_autograd_hands_on(label, make_loss):
    g = grad_output_seen(make_loss)
    drawn = layouts.LAYOUTS[label](torch.zeros(6, 8, device=DEVICE), seed=0)
    assert not g.is_contiguous() and g.stride() == drawn.stride(), (g.stride(), drawn.stride())


def test_grown_inputs_span_several_blocks_keep_shared_sizes_and_valid_targets():
    logits, target = logits_and_target(rows=4, classes=7)
    grown, why = layouts.grow([logits, target, 1e-6], [None, None, None])
    big_logits, big_target = grown[0], grown[1]
    assert big_logits.numel() > 3 * 1024 and big_logits.numel() % 1024 and why == ""
    assert big_logits.shape[0] == big_target.shape[0] and all(s % 2 for s in big_logits.shape)
    assert big_target.dtype == target.dtype and int(big_target.max()) < 7 and grown[2] == 1e-6
    assert not torch.equal(big_logits[0], big_logits[4])  # no two rows equal: a wrong-row read must show


def test_an_integer_argument_equal_to_a_size_stops_the_growth():
    from backward_check.calling import Slot
    x = seeded_randn(3, 5, seed=2)
    grown, why = layouts.grow([x, 5], [Slot(0, "x", x), Slot(1, "cols", 5)])
    assert grown is None and "`cols` = 5" in why


def test_the_comparison_is_relative_with_no_floor():
    small = torch.full((4,), 1e-8, dtype=torch.float64)
    assert relative_error(small * 0, small) == 1.0                  # zeros for a tiny gradient: all wrong
    assert relative_error(small * (1 + 1e-9), small) < 1e-8


def test_a_zero_gradient_for_small_values_is_named():
    """(x * x).mean() with a backward that returns zeros: the gradient is below 1 everywhere."""
    zeros = type("MeanSquareZeros", (torch.autograd.Function,), {
        "forward": staticmethod(lambda ctx, x: (ctx.save_for_backward(x), (x * x).mean())[1]),
        "backward": staticmethod(lambda ctx, g: torch.zeros_like(ctx.saved_tensors[0]))})
    report = check_backward(zeros, seeded_randn(3, 5, seed=3), reference=lambda x: (x * x).mean())
    assert report.traps == ["a wrong formula"], str(report)


def test_wrong_calls_are_refused_with_a_message():
    x = seeded_randn(3, 5, seed=4)
    with pytest.raises(UsageError, match="no floating-point tensor"):
        check_backward(hardened_ops.TritonGELU, torch.arange(4).to(DEVICE))
    with pytest.raises(UsageError, match="cannot take these arguments"):
        check_backward(hardened_ops.TritonGELU, x, x)
    with pytest.raises(UsageError, match="cannot take these arguments"):
        check_backward(LeakyScale, x)                              # alpha and mode are missing
    with pytest.raises(UsageError, match="reference returns"):
        check_backward(MulHonouringNeeds, x, x, reference=lambda x, y: (x * y, x + y))
    with pytest.raises(UsageError, match="autograd.Function subclass or a callable"):
        check_backward(42, x)


def test_finite_differences_past_their_call_budget_are_refused():
    big = seeded_randn(300, 400, seed=5)
    with pytest.raises(UsageError, match="finite differences would need .* pass reference="):
        check_backward(hardened_ops.TritonGELU, big)


def test_the_call_budget_is_a_count_not_a_time():
    """Whether finite differences run depends on the input's size only, never on the machine's speed:
    990 elements need 4 * 990 = 3960 calls (two steps, either side) and run; 1025 need 4100 and are refused."""
    def tanh(x):
        return torch.tanh(x)
    assert check_backward(tanh, seeded_randn(33, 30, seed=7), grow=False).clean
    with pytest.raises(UsageError, match=r"would need 4100 calls of the op \(at most 4000\)"):
        check_backward(tanh, seeded_randn(41, 25, seed=7), grow=False)


def test_a_reference_that_is_not_the_op_is_inconclusive_not_a_trap():
    report = check_backward(hardened_ops.TritonGELU, seeded_randn(3, 5, seed=6), reference=torch.sin)
    assert report.clean and report.inconclusive and "right reference" in report.inconclusive[0], str(report)


def test_integer_and_python_arguments_pass_through_unchanged():
    logits, target = logits_and_target()
    seen = {}

    def spy(logits, target, eps=1e-6, reduction="none"):
        seen.update(target=target.dtype, eps=eps, reduction=reduction)
        return CrossEntropyPerRow.apply(logits, target, eps, reduction)

    check_backward(spy, logits, target, eps=0.25, reduction="none", grow=False)
    assert seen == {"target": torch.int64, "eps": 0.25, "reduction": "none"}


def test_the_report_is_short_and_names_the_section():
    first = type("GELUFirstElement", (torch.autograd.Function,), {
        "forward": staticmethod(lambda ctx, x: (ctx.save_for_backward(x), gelu(x))[1]),
        "backward": staticmethod(lambda ctx, g: g.reshape(-1)[0] * torch.ops.aten.gelu_backward(
            torch.ones_like(ctx.saved_tensors[0]), ctx.saved_tensors[0]))})
    text = str(check_backward(first, seeded_randn(3, 5, seed=7), reference=gelu))
    assert len(text.splitlines()) <= 4 and "[17.1 and 17.3" in text and "grad_output[0]" in text, text


def test_finite_differences_agree_with_autograd_on_a_smooth_op():
    from backward_check.calling import Op
    from backward_check.truth import FiniteDifferences
    x, g = seeded_randn(2, 3, seed=50), seeded_randn(2, 3, seed=51)
    op = Op(torch.sin, (x,), {})
    fd = FiniteDifferences(op, op.values, graded=[0])
    assert fd.computed == torch.float64  # torch.sin computes in float64 when given float64
    expected = fd.expected([g], [1e-4])
    torch.testing.assert_close(expected.grads[0].reshape(2, 3).float(), g * torch.cos(x), atol=1e-6, rtol=1e-6)


def test_a_float32_kernel_under_float64_inputs_is_differenced_at_float32s_step():
    from backward_check.calling import Op
    from backward_check.truth import FiniteDifferences
    from checker_zoo import SiLUInFloat32
    op = Op(SiLUInFloat32, (seeded_randn(3, 5, seed=52),), {})
    assert FiniteDifferences(op, op.values, graded=[0]).computed == torch.float32


def sin_computed_in(dtype, factor):
    """sin computed in a narrow dtype, its backward factor times d sin/dx (1.0: right)."""
    return type(f"SinIn{str(dtype)[6:]}", (torch.autograd.Function,), {
        "forward": staticmethod(lambda ctx, x: (ctx.save_for_backward(x), x.to(dtype).sin().to(x.dtype))[1]),
        "backward": staticmethod(lambda ctx, g: factor * g * ctx.saved_tensors[0].cos())})


def test_finite_differences_too_noisy_to_decide_say_inconclusive_not_trap():
    """bfloat16 inside: its differences measure rounding at any step, so they decide nothing."""
    report = check_backward(sin_computed_in(torch.bfloat16, 1.0), seeded_randn(3, 5, seed=8))
    assert report.clean and any("too noisy" in n for n in report.inconclusive), str(report)
    wrong = sin_computed_in(torch.bfloat16, 1.3)
    assert check_backward(wrong, seeded_randn(3, 5, seed=8)).clean  # undecided, so no verdict either way
    assert check_backward(wrong, seeded_randn(3, 5, seed=8), reference=torch.sin).traps == ["a wrong formula"]


def test_a_float16_kernel_is_differenced_at_float16s_step():
    right, wrong = sin_computed_in(torch.float16, 1.0), sin_computed_in(torch.float16, 1.3)
    assert check_backward(right, seeded_randn(3, 5, seed=8)).clean
    assert check_backward(wrong, seeded_randn(3, 5, seed=8)).traps == ["a wrong formula"]


def test_a_linear_op_under_create_graph_is_clean():
    """Its gradient is a constant, and so is the right one: the second derivative is 0."""
    report = check_backward(lambda x: 2 * x, seeded_randn(3, 5, seed=9), reference=lambda x: 2 * x, second_order=True)
    assert report.clean and "create_graph=True" in report.passed, str(report)


def test_a_list_of_tensors_is_refused_with_a_message_that_says_so():
    x = seeded_randn(3, 5, seed=10)
    with pytest.raises(UsageError, match="list of tensors"):
        check_backward(lambda tensors: torch.cat(tensors), [x, x])
