"""The checker's strategies: the grad_outputs it draws are the ones autograd really hands a backward,
grown inputs keep their relations, and a wrong call is refused with a message."""
import sys

import pytest
import torch
from chapter_scripts import DEVICE, REPO, hardened_ops, seeded_randn
from checker_zoo import (CrossEntropyPerRow, LeakyScale, MulHonouringNeeds, dgelu, gelu, logits_and_target,
                         one_input, triton_gelu)

sys.path.insert(0, str(REPO / "practice"))
from backward_check import strategies  # noqa: E402
from backward_check.calling import Slot  # noqa: E402
from backward_check.checks.truth import FD_MAX_CALLS, relative_error  # noqa: E402
from backward_checker import Sample, UsageError, check_backward  # noqa: E402


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
    ("after .sum(dim=-1) (stride 0 along the last dim)", lambda z: (z.sum(dim=-1) * torch.arange(6.0).to(z.device)).sum()),
    ("after torch.cat(dim=-1) (a narrow view)", lambda z: (torch.cat([z, torch.ones(6, 3, device=z.device)], -1)
                                                          * torch.arange(66.0).reshape(6, 11).to(z.device)).sum()),
    ("after a transpose", lambda z: (z.t() * torch.arange(48.0).reshape(8, 6).to(z.device)).sum()),
])
def test_each_layout_is_the_one_autograd_hands_on(label, make_loss):
    g = grad_output_seen(make_loss)
    drawn = strategies.LAYOUTS[label](torch.zeros(6, 8, device=DEVICE), name="a layout")
    assert not g.is_contiguous() and g.stride() == drawn.stride(), (g.stride(), drawn.stride())


def test_a_one_dimensional_grad_output_after_torch_stack_is_every_other_element():
    x = seeded_randn(7, seed=2).requires_grad_(True)
    z = x * 1.0
    seen = {}
    z.register_hook(lambda g: seen.setdefault("g", g))
    (torch.stack([z, torch.ones_like(z)], dim=-1) * torch.arange(14.0).reshape(7, 2).to(z.device)).sum().backward()
    label = "after torch.stack(dim=-1) (every other element)"
    drawn = strategies.LAYOUTS[label](torch.zeros(7, device=DEVICE), name="a layout")
    assert seen["g"].stride() == drawn.stride() == (2,), (seen["g"].stride(), drawn.stride())
    assert [lab for lab, _ in strategies.layouts_for(torch.zeros(7))] == [label, "after .sum() (all strides 0)"]
    assert label not in [lab for lab, _ in strategies.layouts_for(torch.zeros(6, 8))]


def slots(*names_and_values):
    return [Slot(i, name, value) for i, (name, value) in enumerate(names_and_values)]


def grown(values, names, inputs):
    plans, why = strategies.growth_plans(values, slots(*zip(names, values)), inputs)
    return (strategies.grow(values, plans[0]) if plans else None), why


def test_grown_inputs_span_several_blocks_and_leave_integer_tensors_alone():
    """The logits grow along the classes; the rows, which the integer target has too, stay, and so do the
    target's values: the checker never changes what is not its own to vary."""
    logits, target = logits_and_target(rows=4, classes=7)
    (big_logits, big_target, eps), why = grown([logits, target, 1e-6], ["logits", "target", "eps"], [0])
    assert big_logits.numel() > 3 * 1024 and big_logits.numel() % 1024 and why == ""
    assert big_logits.shape[0] == 4 and big_logits.shape[1] % 2 and torch.equal(big_target, target) and eps == 1e-6
    assert not torch.equal(big_logits[:, 0], big_logits[:, 7])  # no two columns equal: a wrong-column read shows
    ratio = big_logits[:, :7] / logits
    assert bool(((ratio > 0.74) & (ratio < 1.26)).all())  # the given values, in their regime


def test_a_size_pinned_by_an_integer_or_a_no_grad_argument_never_grows():
    x = seeded_randn(3, 5, seed=2)
    (big, cols), why = grown([x, 5], ["x", "cols"], [0])
    assert big.shape[1] == 5 and big.shape[0] > 3 and cols == 5
    table = seeded_randn(5, seed=3)  # a rotary-style table, in no_grad: its size 5 stays, and so does it
    (big, same), _ = grown([x, table], ["x", "table"], [0])
    assert big.shape[1] == 5 and same is table
    tokens = seeded_randn(4, 6, seed=3)
    offsets = torch.tensor([0, 2, 6], device=DEVICE)  # cu_seqlens: the last offset is a length
    (big, kept), _ = grown([tokens, offsets], ["x", "cu_seqlens"], [0])
    assert big.shape[1] == 6 and big.shape[0] > 4 and kept is offsets
    permutation = torch.tensor([2, 0, 1], device=DEVICE)  # its length is x's rows: they stay
    (big, kept), _ = grown([x, permutation], ["x", "index"], [0])
    assert big.shape[0] == 3 and kept is permutation


def test_a_dimension_as_long_as_a_list_of_sizes_never_grows():
    """A grid of coordinates, (batch, points, D), beside the output's shape, a list of D sizes (as a spline library
    pushes values onto a grid): D counts the list's entries, so it stays (grown to 21 it made the op visit 2^21
    corners a point, and the check hung); the points grow. A list of one entry pins nothing."""
    grid = seeded_randn(3, 7, 2, seed=5)
    (big, shape), why = grown([grid, [5, 6]], ["grid", "shape"], [0])
    assert big.shape[2] == 2 and big.shape[1] > 7 and shape == [5, 6] and why == ""
    plans, _ = strategies.growth_plans([grid, [5]], slots(("grid", grid), ("shape", [5])), [0])
    assert any(strategies.grow([grid, [5]], plan)[0].shape[2] > 2 for plan in plans)


def test_no_input_to_grow_says_so():
    """Every input one a function argument reads (kept as it is): no plan, and why, never a raise."""
    x = seeded_randn(3, 5, seed=2)
    plans, why = strategies.growth_plans([x], slots(("x", x)), [])
    assert not plans and why == "no input may change its shape"


def test_nothing_to_grow_says_why():
    x = seeded_randn(3, 5, seed=2)
    plans, why = strategies.growth_plans([x, 3, 5], slots(("x", x), ("rows", 3), ("cols", 5)), [0])
    assert not plans and "`rows` = 3" in why


def test_a_square_input_grows_to_a_rectangle_first():
    """A shape[0] for shape[1] mix-up hides in a square input: the first plan breaks the square; the
    second keeps equal sizes equal, for an op that needs them so (a matrix product)."""
    x = seeded_randn(5, 5, seed=4)
    plans, _ = strategies.growth_plans([x], slots(("x", x)), [0])
    first, second = (strategies.grow([x], p)[0].shape for p in plans)
    assert first[0] != first[1] and second[0] == second[1]


def test_the_comparison_is_relative_with_no_floor():
    small = torch.full((4,), 1e-8, dtype=torch.float64)
    assert relative_error(small * 0, small) == 1.0                  # zeros for a tiny gradient: all wrong
    assert relative_error(small * (1 + 1e-9), small) < 1e-8


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_comparison_of_equal_values_is_zero_and_of_unequal_ones_as_before(seed):
    """relative_error's shortcut for equal tensors: 0 there, and everywhere else the same number as the long way,
    a typical given as a tensor or as its extent (NaN beside NaN, an infinity beside the same, rounding)."""
    from backward_check.checks.truth import extent
    right = seeded_randn(257, seed=seed).double()
    typical = 3 * seeded_randn(257, seed=seed + 10).double()
    assert relative_error(right.clone(), right) == 0.0
    assert relative_error(right.clone(), right, typical=typical, allowance=1e-9) == 0.0
    odd = right.clone()
    odd[3], odd[7] = float("nan"), float("inf")
    same_odd = odd.clone()
    assert relative_error(same_odd, odd) == 0.0                      # NaN beside NaN and inf beside inf agree
    assert relative_error(odd, right) == float("inf")                # a NaN where the right answer has none
    off = right * (1 + 1e-6 * seeded_randn(257, seed=seed + 20).double())
    for allowance in (0.0, 1e-9, torch.full_like(right, 1e-9)):
        assert relative_error(off, right, typical=typical, allowance=allowance) == \
            relative_error(off, right, typical=extent(typical), allowance=allowance) > 0
    exact = right.float()                                             # float32 values, in float32 and float64
    assert relative_error(exact, exact.double()) == 0.0               # dtypes apart: compared the long way
    assert extent(torch.tensor([float("nan"), -2.0, 1.0])) == (pytest.approx(5 ** 0.5), 2.0)
    assert extent(torch.tensor([float("nan")])) == (0.0, 0.0)


def test_a_large_draw_is_made_on_the_tensors_device_and_a_small_one_on_the_cpu():
    """Up to CPU_DRAW elements every machine draws the same values (on the CPU); past it the draw is made where
    the tensor lives, where that device has a generator: a float64 draw on the CPU costs more than a check."""
    assert strategies.CPU_DRAW <= 1 << 16  # at 2^22 the CPU's draws were four fifths of a check on an H100
    assert strategies.draw_on(strategies.CPU_DRAW, "cpu").type == "cpu"
    assert strategies.draw_on(10 * strategies.CPU_DRAW, "cpu").type == "cpu"
    if not torch.cuda.is_available():
        assert strategies.draw_on(10 * strategies.CPU_DRAW, "cuda").type == "cpu"   # no generator there: the CPU
        return
    assert strategies.draw_on(strategies.CPU_DRAW, "cuda").type == "cpu"
    assert strategies.draw_on(strategies.CPU_DRAW + 1, "cuda").type == "cuda"
    small = torch.empty(64, 64, device="cuda")
    assert torch.equal(strategies.randn(small.shape, small, "a stream").cpu(),
                       strategies.randn(small.shape, small.cpu(), "a stream"))
    large = torch.empty(256, 1024, device="cuda")
    drawn = strategies.randn(large.shape, large, "a stream")
    assert drawn.device == large.device and torch.equal(drawn, strategies.randn(large.shape, large, "a stream"))


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


def test_past_the_call_budget_finite_differences_go_along_random_directions():
    """No reference at (300, 400): the right op is clean and the chapter's bug named, judged along directions."""
    big = seeded_randn(300, 400, seed=5)
    report = check_backward(hardened_ops.TritonGELU, big)
    assert report.clean and "random directions" in report.checked, str(report)
    no_chain = one_input(triton_gelu, lambda x, g: dgelu(x), "GELUNoChainRuleBig")
    report = check_backward(no_chain, big)
    assert report.traps == ["ignores grad_output"], str(report)


def test_directions_made_again_judge_as_directions_held(monkeypatch):
    """Twelve directions of a large input are more memory than the input: past KEPT_ELEMENTS they are drawn
    again from their streams each time a gradient is judged along them, never held. The verdicts are the
    same as with the directions held."""
    from backward_check.checks import truth
    big = seeded_randn(300, 400, seed=5)
    right = one_input(torch.tanh, lambda x, g: g * (1 - torch.tanh(x) ** 2), "TanhBig")
    no_chain = one_input(torch.tanh, lambda x, g: 1 - torch.tanh(x) ** 2, "TanhNoChainRuleBig")
    held = [check_backward(op, big) for op in (right, no_chain)]
    monkeypatch.setattr(truth, "KEPT_ELEMENTS", 0)
    again = [check_backward(op, big) for op in (right, no_chain)]
    assert [r.traps for r in held] == [r.traps for r in again] == [[], ["ignores grad_output"]], \
        "\n".join(map(str, held + again))
    assert all("random directions" in r.checked for r in again)


class IgnoresTheFirstBlock(torch.autograd.Function):
    """2 x past the first 1,024 elements: directions within the first block move no output, and are left out."""
    factor = 2.0

    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        return x.reshape(-1)[1024:] * 2

    @classmethod
    def backward(cls, ctx, g):
        grad = g.new_zeros(ctx.shape.numel())
        grad[1024:] = cls.factor * g
        return grad.reshape(ctx.shape)


class IgnoresTheFirstBlockThrice(IgnoresTheFirstBlock):
    factor = 3.0


@pytest.mark.parametrize("held_directions", [0, 10, 11])
def test_directions_held_only_once_some_are_left_out_judge_alike(monkeypatch, held_directions):
    """Twelve directions are too many to hold, the ten kept after two moved nothing are not (held_directions
    10 or 11 of the input's size): those ten are made again once, and held. A tree that held none of them
    there failed in its own code ('NoneType' has no attribute 'to') on Liger's cross-entropy shape; every
    threshold judges as with all of them held."""
    from backward_check.checks import truth
    big = seeded_randn(300, 400, seed=5)
    ops = (IgnoresTheFirstBlock, IgnoresTheFirstBlockThrice)
    held = [check_backward(op, big) for op in ops]
    monkeypatch.setattr(truth, "KEPT_ELEMENTS", held_directions * big.numel())
    again = [check_backward(op, big) for op in ops]
    shown = "\n".join(map(str, held + again))
    assert [r.traps for r in again] == [r.traps for r in held] and held[0].clean and held[1].traps, shown
    assert not any("the checker itself failed" in str(r) for r in held + again), shown
    assert all("10 random directions" in r.checked for r in again), shown


class RowsInFloat32(torch.autograd.Function):
    """A loss as a fused kernel computes it: each row's logsumexp in float32 whatever the input's dtype (a
    Triton kernel that casts its loads), their sum in the input's dtype. Liger-Kernel's cross-entropy with
    reduction 'sum' is one."""
    factor = 1.0

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.logsumexp(x.float(), dim=1).to(x.dtype).sum()

    @classmethod
    def backward(cls, ctx, g):
        x, = ctx.saved_tensors
        return (torch.softmax(x.float(), dim=1) * cls.factor).to(x.dtype) * g


class RowsInFloat32TimesOneAndAHalf(RowsInFloat32):
    factor = 1.5


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 1025), (3, 1027), (41, 100), (200, 3000)])  # one block past, several, large
def test_a_loss_summed_over_float32_rows_is_differenced_at_a_float32_step(shape, dtype):
    """Along directions, called in float64, such a loss moves only by its float32 rounding at a float64 step:
    the differences were 0 or noise, and the right backward 'a wrong formula' (inf off). Stepped as float32,
    the right one is clean and a wrong one named, from one block past the finite-difference budget up."""
    x = seeded_randn(*shape, seed=11).to(dtype)
    right = check_backward(RowsInFloat32, x)
    # (200, 3000) is past the slice's threshold: four directions on the whole, twelve on its slice
    assert right.clean and ("12 random directions" in right.checked or "and 12 on the slice" in right.checked), str(right)
    wrong = check_backward(RowsInFloat32TimesOneAndAHalf, x)
    assert wrong.traps == ["a wrong formula"], str(wrong)


def test_the_call_budget_is_a_count_not_a_time():
    """How finite differences run depends on the input's size only, never on the machine's speed: 250
    elements need 4 * 250 = 1000 calls (two steps, either side), column by column; 260 would need 1040, so
    they go along random directions, whose calls do not grow with the elements."""
    calls = []

    def tanh(x):
        calls.append(x.numel())
        return torch.tanh(x)
    assert 4 * 250 <= FD_MAX_CALLS < 4 * 260
    assert "random directions" not in check_backward(tanh, seeded_randn(25, 10, seed=7), grow=False).checked
    assert "random directions" in check_backward(tanh, seeded_randn(26, 10, seed=7), grow=False).checked
    counts = []
    for shape in ((41, 25), (410, 250)):
        calls.clear()
        report = check_backward(tanh, seeded_randn(*shape, seed=7), grow=False)
        assert report.clean and "random directions" in report.checked, str(report)
        counts.append(len(calls))
    assert counts[0] == counts[1] < 400, counts


class MulOneElementOff(torch.autograd.Function):
    """a * b, with element 7 of a's gradient OFF times what it should be."""
    OFF = 1.05

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @classmethod
    def backward(cls, ctx, g):
        a, b = ctx.saved_tensors
        scale = torch.ones(b.numel(), dtype=b.dtype, device=b.device)
        scale[7] = cls.OFF
        return g * b * scale.reshape(b.shape), g * a


class MulOnePercentOff(MulOneElementOff):
    OFF = 1.01


@pytest.mark.parametrize("shape", [(10, 20), (16, 16), (31, 8)])  # 200 elements; 256, the most; 248 in ragged rows
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_one_wrong_element_of_one_of_two_small_inputs_is_stepped_and_named(dtype, shape):
    """Two (10, 20) inputs (and two of 256 elements, the most, or of ragged rows) take 1,600 calls column by
    column, past the 1,024 of the budget but within the 4,000 they had before directions took over: each input's
    own columns fit, so each is stepped element by element, where a direction across all 200 elements would
    dilute the wrong one (docs/check-cost.md). 5% off is named in both dtypes (along directions, float32 gave
    only a ?? line); 1% off in float32 is at least a ?? line, never a clean bill (along directions it was
    clean)."""
    a, b = seeded_randn(*shape, seed=1).to(dtype), seeded_randn(*shape, seed=2).to(dtype)
    report = check_backward(MulOneElementOff, a, b, grow=False)
    assert "random directions" not in report.checked, str(report)
    assert report.traps == ["a wrong formula"], str(report)
    if shape != (10, 20):
        return
    report = check_backward(MulOnePercentOff, a, b, grow=False)
    assert report.traps == ["a wrong formula"] or (not report.traps and report.inconclusive), str(report)


def test_the_blind_spot_the_docs_name_past_the_budget():
    """docs/library-authors.md says: a product of two 2,000-element float32 inputs, one element of a gradient 5%
    off, came out clean. Along directions one element of 2,000 is below what they see; if this ever names it,
    the page (and check-cost.md) should say so."""
    a, b = seeded_randn(40, 50, seed=1), seeded_randn(40, 50, seed=2)
    report = check_backward(MulOneElementOff, a, b, grow=False)
    assert "random directions" in report.checked and report.clean, str(report)


def test_only_the_input_too_large_to_step_goes_along_directions():
    """A (4, 150) input beside a 150-element one: 3,000 calls column by column, within the 4,000 of before, but
    the first input's own 2,400 are past the budget: it alone goes along directions, and the report says which.
    Both gradients right: clean, in fewer calls than stepping every element."""
    calls = []

    def scaled(x, w):
        calls.append(1)
        return torch.tanh(x) * w

    x, w = seeded_randn(4, 150, seed=3), seeded_randn(150, seed=4)
    report = check_backward(scaled, x, w, grow=False)
    assert report.clean, str(report)
    assert "random directions of `x`" in report.checked and "element by element elsewhere" in report.checked, \
        str(report)
    assert len(calls) < 4 * (600 + 150), len(calls)


def test_a_forward_that_disagrees_with_the_reference_is_a_wrong_forward():
    report = check_backward(hardened_ops.TritonGELU, seeded_randn(3, 5, seed=6), reference=torch.sin)
    assert report.traps == ["a wrong forward"], str(report)
    assert any(u.because == "the forward" for u in report.undecided), str(report)  # its gradient not judged


def test_a_sample_keeps_the_ops_arguments_apart_from_the_checkers_options():
    """An op whose keyword is called `reference`: inside a Sample it is the op's, never the checker's."""
    def scaled(x, reference=2.0):
        return torch.tanh(x) * reference
    report = check_backward(scaled, Sample(seeded_randn(3, 5, seed=6), reference=3.0),
                            reference=lambda x, reference=2.0: torch.tanh(x) * reference, grow=False)
    assert report.clean, str(report)
    with pytest.raises(UsageError, match="either in one Sample"):
        check_backward(scaled, Sample(seeded_randn(3, 5, seed=6)), seeded_randn(3, 5, seed=6))


def test_integer_and_python_arguments_pass_through_unchanged():
    logits, target = logits_and_target()
    seen = {}

    def spy(logits, target, eps=1e-6, reduction="none"):
        seen.update(target=target.dtype, eps=eps, reduction=reduction)
        return CrossEntropyPerRow.apply(logits, target, eps, reduction)

    check_backward(spy, logits, target, eps=0.25, reduction="none", grow=False)
    assert seen == {"target": torch.int64, "eps": 0.25, "reduction": "none"}


def test_the_report_is_short_and_names_the_section_on_a_line_of_its_own():
    """The trap's name and its evidence first, in the author's terms; the remedy, and where the book teaches it,
    on the next line."""
    first = type("GELUFirstElement", (torch.autograd.Function,), {
        "forward": staticmethod(lambda ctx, x: (ctx.save_for_backward(x), gelu(x))[1]),
        "backward": staticmethod(lambda ctx, g: g.reshape(-1)[0] * torch.ops.aten.gelu_backward(
            torch.ones_like(ctx.saved_tensors[0]), ctx.saved_tensors[0]))})
    text = str(check_backward(first, seeded_randn(3, 5, seed=7), reference=gelu))
    trap, = [line for line in text.splitlines() if line.startswith("  TRAP")]
    fix = text.splitlines()[text.splitlines().index(trap) + 1]
    assert len(text.splitlines()) <= 6 and "grad_output[0]" in trap, text
    assert "17." not in trap and "Chapter" not in trap and "[" not in trap.split(":")[0], text
    assert fix.strip().startswith("fix: multiply elementwise") and fix.endswith("(the book: 17.1 and 17.3: 2, 1 + 1 "
                                                                                "and 3 + 2 are all uniform)"), text


def test_finite_differences_agree_with_autograd_on_a_smooth_op():
    from backward_check.calling import Op
    from backward_check.checks.truth import FiniteDifferences
    x, g = seeded_randn(2, 3, seed=50), seeded_randn(2, 3, seed=51)
    op = Op(torch.sin, (x,), {})
    fd = FiniteDifferences(op, op.values, graded=[0])
    assert fd.computed == torch.float64  # torch.sin computes in float64 when given float64
    expected = fd.expected([g], [1e-4])
    torch.testing.assert_close(expected.grads[0].reshape(2, 3).float(), g * torch.cos(x), atol=1e-6, rtol=1e-6)


def test_a_float32_kernel_under_float64_inputs_is_differenced_at_float32s_step():
    from backward_check.calling import Op
    from backward_check.checks.truth import FiniteDifferences
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


def test_a_list_of_tensors_alone_is_refused_with_a_message_that_says_how_to_pass_them():
    """A list of tensors that takes no gradient is a constant (tests/test_checker_tensor_lists.py); with nothing
    else to take a gradient for, the message says to pass the tensors one by one."""
    x = seeded_randn(3, 5, seed=10)
    with pytest.raises(UsageError, match=r"a list of tensors, as \['tensors'\] hold, is passed as it is.*one by one"):
        check_backward(lambda tensors: torch.cat(tensors), [x, x])


def test_a_cut_error_message_never_leaves_a_bracket_open():
    from backward_check.calling import clip
    message = "RuntimeError: view size is not compatible with input tensor's size and stride (at least one dimension spans across two contiguous subspaces). Use .reshape(...) instead."
    cut = clip(message, 90)
    assert cut.endswith(" ...") and cut.count("(") == cut.count(")") and len(cut) <= 94, cut
    assert clip("short (and whole)") == "short (and whole)"


def test_a_report_that_could_not_decide_never_says_clean():
    """bfloat16 inside: finite differences cannot decide, and the head line says so instead of 'clean'."""
    report = check_backward(sin_computed_in(torch.bfloat16, 1.0), seeded_randn(3, 5, seed=8), grow=False)
    head = str(report).splitlines()[0]
    assert report.clean and not report.decided and "clean" not in head.replace("not a clean bill", ""), head
    assert "could not decide" in head and "??" in str(report)


def test_an_op_with_a_generator_of_its_own_is_undecided_not_stateful():
    """Its forward differs between two identical calls (a dropout on its own generator): no two calls can be
    compared, and the report says so instead of blaming the backward."""
    class OwnDropout(torch.autograd.Function):
        generator = torch.Generator(device=DEVICE.type).manual_seed(5)

        @staticmethod
        def forward(ctx, x):
            mask = (torch.rand(x.shape, generator=OwnDropout.generator, device=x.device) > 0.5).to(x.dtype) * 2
            ctx.save_for_backward(mask)
            return x * mask

        @staticmethod
        def backward(ctx, g):
            mask, = ctx.saved_tensors
            return g * mask
    report = check_backward(OwnDropout, seeded_randn(3, 5, seed=11), grow=False)  # no reference can know its mask
    assert report.clean and any("cannot seed" in u.reason for u in report.undecided), str(report)


def test_an_op_that_refuses_the_nudged_values_is_undecided_not_a_traceback():
    """|x| >= 0.5 is the op's own domain, which no property of the values shows (they have both signs): a step
    from 0.5 + 1e-9 leaves it, and the op refuses the nudged values."""
    class CheckedSquare(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            if bool((x.abs() < 0.5).any()):
                raise ValueError("|x| below 0.5")
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return 2 * x * g
    x = seeded_randn(3, 5, seed=12)
    x = x.sign() * (x.abs() + 1.0)
    x[0, 0] = 0.5 + 1e-9
    report = check_backward(CheckedSquare, x, grow=False)
    assert report.clean and any("refuses them" in u.reason for u in report.undecided), str(report)


def test_a_step_stays_inside_non_negative_values():
    """A square root's input, all of it non-negative, one element at 1e-7: finite differences step it by less
    than its distance from 0 (a step of the input's typical size would leave the op's domain), so the check
    decides, and a backward off by a factor is still named."""
    def checked_sqrt(backward):
        def forward(ctx, x):
            if bool((x < 0).any()):
                raise ValueError("negative input")
            y = x.sqrt()
            ctx.save_for_backward(y)
            return y
        return type("CheckedSqrt", (torch.autograd.Function,), {
            "forward": staticmethod(forward),
            "backward": staticmethod(lambda ctx, g: backward(ctx.saved_tensors[0], g))})
    x = seeded_randn(3, 5, seed=12).abs() + 1.0
    x[0, 0] = 1e-7
    report = check_backward(checked_sqrt(lambda y, g: g / (2 * y)), x, grow=False)
    assert report.clean and report.decided, str(report)
    report = check_backward(checked_sqrt(lambda y, g: g / y), x, grow=False)
    assert report.traps == ["a wrong formula"], str(report)


def test_a_no_grad_name_that_is_no_argument_is_a_usage_error():
    x = seeded_randn(3, 5, seed=13)
    with pytest.raises(UsageError, match=r"no_grad names \['tabel'\]"):
        check_backward(lambda x, table: x * table, x, x, no_grad=("tabel",))
    with pytest.raises(UsageError, match="no_grad names"):
        check_backward(lambda x, table: x * table, x, x, no_grad=(True,))


def test_create_graph_without_a_reference_is_undecided():
    """A gradient that carries a graph may still be the wrong one: without a reference nothing can tell."""
    report = check_backward(lambda x: x ** 3, seeded_randn(3, 5, seed=14), second_order=True, grow=False)
    assert report.clean and any(u.check == "create_graph=True" for u in report.undecided), str(report)


def test_jittered_values_make_no_new_ties_and_stay_in_range():
    """The checker must not create what the user's values did not have: no clamp to the range's ends, so no
    ties at a row's maximum for a top-k to break either way; a probability stays a probability."""
    x = seeded_randn(8, 33, seed=11, dtype=torch.float64)
    jittered = strategies.jittered(x, "ties")
    assert all(row.unique().numel() == row.numel() for row in jittered)
    assert not bool((jittered == x.max()).any() or (jittered == x.min()).any())
    p = torch.rand(8, 33, generator=torch.Generator().manual_seed(2), dtype=torch.float64).to(DEVICE)
    q = strategies.jittered(p, "probabilities")
    assert bool(((q >= p.min()) & (q <= p.max())).all()) and q.unique().numel() == q.numel()


def test_the_gaps_of_narrow_views_hold_nan():
    """As torch's noncontiguous_like: a kernel reading with the wrong stride reads NaN, never plausible numbers."""
    t = torch.zeros(4, 6, device=DEVICE)
    narrow = strategies.after_cat(t, "gaps")
    assert narrow.stride() == (9, 1) and not narrow.isnan().any()
    assert narrow.as_strided((4 * 9 - 3,), (1,)).isnan().sum() == 3 * 3
    for x in (seeded_randn(4, 6, seed=12), seeded_randn(7, seed=13)):
        padded = strategies.padded_copy(x)
        assert not padded.is_contiguous() and torch.equal(padded, x)
        storage = padded.as_strided((padded.untyped_storage().nbytes() // padded.element_size(),), (1,), 0)
        assert storage.isnan().sum() == storage.numel() - x.numel()
    labels = [label for label, _ in strategies.input_layouts_for(seeded_randn(7, seed=13))]
    assert labels == [strategies.PADDED]  # a 1-D input too


def test_a_kernel_that_takes_the_row_stride_for_granted_is_named_on_a_padded_view():
    """flash-attn's maybe_contiguous repairs only a last-dimension stride other than 1; a kernel behind it that
    assumes rows of shape[-1] elements is wrong on qkv[:, :d], which the checker now lays its inputs out as."""
    def maybe_contiguous(x):
        return x if x.stride(-1) == 1 else x.contiguous()

    def rows_assumed(x):  # reads x's storage as if its rows were packed
        return torch.as_strided(x, x.shape, (x.shape[-1], 1), x.storage_offset())

    class SquareRowsAssumed(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x = maybe_contiguous(x)
            ctx.save_for_backward(x)
            return rows_assumed(x) * rows_assumed(x)

        @staticmethod
        def backward(ctx, grad_output):
            x, = ctx.saved_tensors
            return 2 * rows_assumed(x) * grad_output

    report = check_backward(SquareRowsAssumed, seeded_randn(6, 5, seed=14), reference=lambda x: x * x)
    assert report.traps == ["assumes a contiguous input"] and "`x[..., :5]` of a buffer 8 wide" in str(report), \
        str(report)


class ScaleReadsWeightPacked(torch.autograd.Function):
    """y = x * w, w broadcast along the rows; the backward reads w's memory as if w were contiguous for x's
    gradient (as PyTorch's CPU batch_norm reads its weight for an (N, C) input), and w's own gradient is right."""
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        packed = torch.as_strided(w, w.shape, (1,), w.storage_offset())  # BUG: w's strides taken for granted
        return g * packed, (g * x).sum(dim=0)


def test_a_layout_finding_names_the_input_whose_layout_decides_it():
    """The weight laid out as `weight[::2]` spoils x's gradient, not its own: the finding names the weight, how
    it was laid out, and x's gradient with how much of it changed; the same op with the weight contiguous is
    clean of it."""
    x, w = seeded_randn(8, 4, seed=15), 1 + 0.1 * seeded_randn(4, seed=16)
    report = check_backward(ScaleReadsWeightPacked, x, w, reference=lambda x, w: x * w, grow=False)
    finding, = report.findings
    assert finding.trap.name == "assumes a contiguous input" and finding.input == "`w`", str(report)
    assert "`w` given as `w[::2]`" in finding.evidence and "strides (2,)" in finding.evidence, finding.evidence
    assert "`x`'s gradient is NaN or infinite in 16 of 32 elements" in finding.evidence, finding.evidence
    assert "`w`'s gradient" not in finding.evidence and "reads `w` as if contiguous" in finding.evidence


def test_pytorchs_cpu_batch_norm_with_a_strided_weight_is_named_by_its_weight():
    """PyTorch's own F.batch_norm(training=True) on the CPU reads a strided weight as if contiguous for an (N, C)
    input (research/wild/torch_batch_norm.py shows it without the checker); where this PyTorch has the bug, the
    finding names the weight and the input's gradient."""
    if DEVICE.type != "cpu":
        pytest.skip("the bug is in PyTorch's CPU kernel, and the checker calls the op on the GPU here")
    sys.path.insert(0, str(REPO / "research" / "wild"))
    import torch_batch_norm
    if torch_batch_norm.main([]) != 0:
        pytest.skip("this PyTorch reads a strided weight right")

    def batch_norm(x, weight, bias):
        return torch.nn.functional.batch_norm(x, None, None, weight, bias, training=True)
    x, w, b = seeded_randn(8, 4, seed=17), 1 + 0.1 * seeded_randn(4, seed=18), 0.1 * seeded_randn(4, seed=19)
    report = check_backward(batch_norm, x, w, b, reference=batch_norm, grow=False)
    finding, = report.findings
    assert finding.input == "`weight`" and "`x`'s gradient is NaN" in finding.evidence, str(report)


def scaled_by_the_smallest(factor):
    """x * (1 + x[m]) for m the index of x's smallest square, returned beside it; the backward holds m fixed, as
    linear_operator's pivoted Cholesky holds its pivots, and is factor times the right one."""
    def forward(ctx, x):
        m = (x * x).argmin()
        ctx.save_for_backward(x, m)
        return x * (1 + x[m]), m

    def backward(ctx, g, _):
        x, m = ctx.saved_tensors
        grad = g * (1 + x[m])
        grad[m] += (g * x).sum()
        return factor * grad
    return type("ScaledByTheSmallest", (torch.autograd.Function,), {"forward": staticmethod(forward),
                                                                     "backward": staticmethod(backward)})


def test_a_step_that_changes_what_the_op_picks_is_left_out():
    """Two zeros tie for the smallest square, and the op picks the first. A step of either zero, up or down,
    makes the other the smallest on both sides alike: the central differences agree at both steps, but measure
    the other selection's derivative (before, 'a wrong formula', 0.87 off). The index the op returns changes
    there, so that column is left out, as a kink is, and the other columns decide: the right backward is clean,
    one off by a factor still named."""
    x = seeded_randn(7, seed=22)
    x[1] = x[3] = 0.0
    report = check_backward(scaled_by_the_smallest(1.0), x, grow=False)
    assert report.clean and report.decided, str(report)
    assert check_backward(scaled_by_the_smallest(1.5), x, grow=False).traps == ["a wrong formula"]


class ScaledByWhereTheLargestIs(torch.autograd.Function):
    """x * (1 + m) for m the index of x's largest value, ties broken toward the last by offsets of 1e-9 that
    float32 rounds away (so float32 picks the first of two tied values, float64 the last); m is returned beside."""
    @staticmethod
    def forward(ctx, x):
        offsets = 1e-9 * torch.arange(x.numel(), dtype=x.dtype, device=x.device)
        m = (x + offsets).argmax()
        ctx.save_for_backward(m)
        return x * (1 + m), m

    @staticmethod
    def backward(ctx, g, _):
        m, = ctx.saved_tensors
        return g * (1 + m)


def test_finite_differences_pick_as_the_op_does_in_its_own_dtype():
    """Two float32 values tie for the largest: the op picks the first in float32, its own dtype, and the last in
    float64. Differences in float64 would measure the other selection's derivative everywhere ('a wrong
    formula'); the checker differences it in float32, where it picks as the op's own call did, and the columns of
    the two tied values, whose steps change the pick, are left out."""
    x = seeded_randn(7, seed=23)
    x[2] = x[5] = x.max() + 1
    report = check_backward(ScaledByWhereTheLargestIs, x, grow=False)
    assert report.clean and report.decided, str(report)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_each_directions_differences_are_the_plain_formulas_bit_for_bit(dtype):
    """Along directions the differences are taken in place (truth.FiniteDifferences._directional): every row is
    (f(x + h u) - f(x - h u)) / 2h at each of the two steps, and each direction as the op saw it is
    ((x + h u) - (x - h u)) / 2h, in the input's dtype, exactly as the plain formulas give them."""
    from backward_check.calling import Op, same_layout
    from backward_check.checks.truth import FiniteDifferences, flat
    x = (seeded_randn(40, 50, seed=53) + 0.5).to(dtype).t()  # 2,000 elements, transposed: along directions
    op = Op(torch.nn.functional.softplus, (x,), {})
    fd = FiniteDifferences(op, op.values, graded=[0])
    directions = fd.directions[0]
    assert len(directions.kept) == 12
    fine, coarse = fd.jacobians[0]
    for row, k in enumerate(directions.kept):
        u = directions.unit(k)
        for factor, rows in ((1, fine), (2, coarse)):
            h = factor * directions.step
            shift = (h * u).reshape(x.shape).to(dtype=fd.dtype or x.dtype)
            plus = same_layout(x.detach(), fd.dtype) + shift
            minus = same_layout(x.detach(), fd.dtype) - shift
            with torch.no_grad():
                plain = (flat(torch.nn.functional.softplus(plus)) - flat(torch.nn.functional.softplus(minus))) / (2 * h)
            assert torch.equal(rows[row], plain), (k, factor)
            if factor == 1:
                assert torch.equal(directions.seen(k), (flat(plus) - flat(minus)) / (2 * directions.step)), k


def test_the_batch_norm_probe_refuses_a_device_it_cannot_use(capsys):
    """research/wild/torch_batch_norm.py --device meta (no values), or one torch does not know: exit 2, one line."""
    sys.path.insert(0, str(REPO / "research" / "wild"))
    import torch_batch_norm
    for device in ("meta", "no-such-device"):
        with pytest.raises(SystemExit) as done:
            torch_batch_norm.main(["--device", device])
        assert done.value.code == 2 and f"--device {device}:" in capsys.readouterr().err
