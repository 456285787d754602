"""Property tests of the backward checker over the case families of tests/checker_zoo_families.py: for each
family, Hypothesis draws a shape across block boundaries (under a block, exactly 1024 elements, 1025, several
blocks with a tail; 1-D, 2-D and 3-D, last dimensions that are and are not multiples of 16), a dtype, a seed
and a scale the family takes, and the report must name exactly the family's traps (its size_rule's, where the
verdict rightly depends on the size); a legal family must come back clean, a ?? line allowed only where the
family says why (undecided_ok). Each family's claim is proved without the checker by
tests/checker_zoo_families_probes.py (tests/test_checker_zoo_families.py runs those probes).

BACKWARD_CHECK_EXAMPLES sets the examples per family (default 3: with the 7 boundary examples of each
elementwise family, about 140 calls of the checker, 1.5 to 2 minutes on two CPU cores; a GPU run sets more). Shrinking is off unless BACKWARD_CHECK_SHRINK=1 (each call of the checker
costs a second on the CPU). derandomize=True: a run draws the same examples every time, here and in CI.
A failure prints the family, shape, dtype, seed and scale, a line that rebuilds the case, and the report.
"""
import os
import sys

import pytest
import torch
from chapter_scripts import REPO
from checker_zoo import MulHonouringNeeds
from checker_zoo_families import FAMILIES, SHAPES, numel
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(REPO / "practice"))
from backward_checker import check_backward  # noqa: E402

EXAMPLES = int(os.environ.get("BACKWARD_CHECK_EXAMPLES", "3"))
PHASES = (Phase.explicit, Phase.reuse, Phase.generate) + \
    ((Phase.shrink,) if os.environ.get("BACKWARD_CHECK_SHRINK") == "1" else ())
SETTINGS = dict(deadline=None, derandomize=True, database=None, print_blob=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def case_strategy(fam):
    """(shape, dtype, seed, scale): a size class first (so few examples still cross block boundaries), then a
    rank and a shape of it the family takes, a dtype, a seed and a scale."""
    classes = [c for c, by_rank in SHAPES.items()
               if any(numel(s) <= fam.max_numel for r in fam.ranks for s in by_rank.get(r, []))]
    shapes = st.sampled_from(classes).flatmap(lambda c: st.sampled_from(
        [s for r in fam.ranks for s in SHAPES[c].get(r, []) if numel(s) <= fam.max_numel]))
    return st.tuples(shapes, st.sampled_from(fam.dtypes), st.integers(0, 2 ** 16), st.sampled_from(fam.scales))


def judge(name, shape, dtype, seed, scale):
    fam = FAMILIES[name]
    case = fam.make(tuple(shape), dtype, seed, scale)
    report = check_backward(case.op, *case.args, reference=case.reference, **case.options, **case.kwargs)
    expected = fam.expected(shape)
    where = (f"family {name!r}, shape={tuple(shape)}, dtype={dtype}, seed={seed}, scale={scale:g}\n"
             f"  rebuild: FAMILIES[{name!r}].make({tuple(shape)}, {dtype}, {seed}, {scale!r})"
             f"{f'  (pending: {fam.pending})' if fam.pending else ''}\n{report}")
    assert set(report.traps) == set(expected), f"expected traps {sorted(expected)}, got {report.traps}: {where}"
    if not expected:
        assert not report.inconclusive or fam.undecided_ok, f"clean expected, got ?? lines: {where}"
    return report


@pytest.mark.parametrize("name", list(FAMILIES))
@settings(max_examples=EXAMPLES, phases=PHASES, **SETTINGS)
@given(data=st.data())
def test_a_family_gets_its_verdict_at_every_size(name, data):
    shape, dtype, seed, scale = data.draw(case_strategy(FAMILIES[name]), label="shape, dtype, seed, scale")
    judge(name, shape, dtype, seed, scale)


ELEMENTWISE = [name for name, fam in FAMILIES.items() if fam.cls == "a"]


@pytest.mark.parametrize("name", ELEMENTWISE)
@settings(phases=(Phase.explicit,), **SETTINGS)
@given(shape=st.sampled_from([(15,)]), dtype=st.just(torch.float32), seed=st.just(0), scale=st.just(1.0))
@example(shape=(1024,), dtype=torch.float32, seed=0, scale=1.0)       # exactly one block (kept: a multiple of 16)
@example(shape=(1025,), dtype=torch.float32, seed=0, scale=1.0)       # a block and a one-element tail
@example(shape=(2049,), dtype=torch.float32, seed=2, scale=1.0)       # two blocks and a tail
@example(shape=(3 * 1024 + 7,), dtype=torch.float32, seed=3, scale=1.0)  # three blocks and a tail, not grown
@example(shape=(32, 32), dtype=torch.float32, seed=4, scale=1.0)      # one block in 2-D, kept
@example(shape=(25, 41), dtype=torch.float32, seed=5, scale=1.0)      # 1025 in 2-D
@example(shape=(3, 13, 79), dtype=torch.float64, seed=7, scale=1.0)   # several blocks in 3-D, float64
def test_elementwise_families_at_the_block_boundaries(name, shape, dtype, seed, scale):
    judge(name, shape, dtype, seed, scale)


# Verdicts a wider sweep than Hypothesis's examples found wrong (every shape of SHAPES a family takes, each dtype
# and scale, seeds 0 to 2), or the GPU command's examples did, kept as they were drawn: each one failed before its fix.
FOUND_BY_A_SWEEP = [
    # b's gradient of a batch of 3 rows, 0 in exact arithmetic, returned as exact zeros: the float64 reference's
    # answer for it is rounding (3.4e-14 in a column where the float32 reference's rounding was exactly 0), so
    # the element was "far off" by its own vanishing size, and the verdict "ignores grad_output"
    ("bias_batch_norm_zeros", (3, 1025), torch.float64, 2, 1.0),
    # A 0/-inf masked softmax of 300 float32 elements at scale 10 (logits up to 31), without a reference (the GPU
    # command's examples drew the first): once finite differences went along random directions past 256 elements
    # (not 1,000), every element's step moved the peak at once, and the two steps disagreed by 10 and by 0.44
    # (relative), "too noisy to decide", where column by column decides it. Such an input goes column by column again.
    ("masked_softmax_no_reference", (300,), torch.float32, 568, 10.0),
    ("masked_softmax_no_reference", (300,), torch.float32, 1, 10.0),
]


@pytest.mark.parametrize("name, shape, dtype, seed, scale", FOUND_BY_A_SWEEP)
def test_a_verdict_a_wider_sweep_found_wrong(name, shape, dtype, seed, scale):
    judge(name, shape, dtype, seed, scale)


# Verdicts the checker got wrong before it judged low precision by the op's own noise, and the names a hidden probe
# found wrong (each case written anew from the description): each failed at aeba4a0, as the comment says.
JUDGED_BY_ITS_OWN_NOISE = [
    # "assumes a uniform grad_output" at 5e-4: the first query's dq, 0 in exact arithmetic, came back as a float16
    # step or two of float32 rounding, where the reference's was exactly 0 (the unmeasured element's floor)
    ("attention_causal", (12, 33), torch.float16, 0, 1.0),
    ("attention_causal", (32, 32), torch.bfloat16, 2, 1.0),
    ("attention_blocked", (39, 79), torch.float16, 0, 1.0),
    # a ?? line: the gate's gradient, its first element 0 in exact arithmetic, off by TF32 rounding the reference
    # does not make (the op's own noise, measured from its departure from linearity)
    ("chunked_scan_tf32", (39, 79), torch.float32, 0, 1.0),
    # "a wrong formula", "assumes a contiguous grad_output" and "assumes a contiguous input": the gradient for
    # grad_output = 1 is 0 but for rounding, the op's and the reference's differ (the op's own answer for ones),
    # and two of the op's rounding-level answers were compared with each other's size (the right one's, now)
    ("layer_norm_weight_ones_for_ones", (12, 33), torch.float32, 0, 1.0),
    # clean: autograd casts the float16 gradient back to bfloat16 (a dtype that holds every input value)
    ("square_gradient_in_float16", (3, 5), torch.bfloat16, 0, 1.0),
    # "assumes a contiguous grad_output" and "assumes a contiguous input": no 1-D layout but .sum()'s stride 0, and a
    # backward that raised on x[::2] was not tried with grad_output laid out alike
    ("square_reads_grad_output_like_input", (15,), torch.float32, 0, 1.0),
    # "a wrong formula" and "assumes a contiguous grad_output": x given as x[::2], a contiguous grad_output is the one
    # it gets wrong, and no check tried grad_output laid out like x
    ("square_reads_grad_output_like_input_given_strided", (15,), torch.float32, 0, 1.0),
    # clean: the elements below -20 were judged by their neighbours' rounding, 1e-8, beside errors of 1e-9
    ("softplus_2exp_below_-20", (300,), torch.float32, 0, 1.0),
]


@pytest.mark.parametrize("name, shape, dtype, seed, scale", JUDGED_BY_ITS_OWN_NOISE)
def test_a_verdict_judged_by_the_ops_own_noise(name, shape, dtype, seed, scale):
    judge(name, shape, dtype, seed, scale)


class MulWrongOnBoth(MulHonouringNeeds):
    """x * y whose backward is wrong for both inputs, by different amounts: x's gradient times 1.5, y's times 3."""
    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return 1.5 * g * y, 3.0 * g * x


def test_each_input_shows_its_own_evidence_under_one_trap():
    """One trap on two inputs: the report's TRAP line gives the first input's evidence with its numbers, an 'also'
    line the second's with its own, so one input's finding never hides another's; the remedy and the book's
    section sit on a line of their own."""
    x, y = (torch.randn(4, 6, generator=torch.Generator().manual_seed(s), dtype=torch.float64) for s in (1, 2))
    report = check_backward(MulWrongOnBoth, x, y, reference=torch.mul)
    lines = str(report).splitlines()
    trap = next(k for k, line in enumerate(lines) if line.startswith("  TRAP  a wrong formula: input `x`"))
    assert lines[trap + 1].strip().startswith("fix: derive the local derivative again") and \
        "(the book: Chapter 16)" in lines[trap + 1], report
    also = [line for line in lines if line.strip().startswith("also input `y`")]
    assert len(also) == 1 and "(2 off, relative" in also[0] and "(0.5 off, relative" in lines[trap], report


def test_a_float32_op_with_a_float16_gradient_is_not_excused_by_its_own_noise():
    """Called as a plain function, so that no check reads what its backward returns: its gradient is as noisy as
    float16 (5e-4 off), and over the whole gradient the op's noise widens float32's tolerance at most twofold, so
    it is at least too close to call, never clean."""
    from checker_zoo import one_input, square
    half = one_input(square, lambda x, g: (2 * x * g).half(), "SquareInHalf")
    x = torch.randn(8, 33, generator=torch.Generator().manual_seed(3))
    report = check_backward(lambda x: half.apply(x), x, reference=square, name="square_in_half")
    assert report.headline != "clean" and (report.traps or any("just past" in u for u in report.inconclusive)), \
        str(report)


class ShiftedGradOutput(torch.autograd.Function):
    """y = 2x whose backward reads grad_output one element along: right for any uniform grad_output, wrong for a
    random one, and the answer for no single value of it (flash-linear-attention's shifted slot index, case 12)."""
    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, g):
        return 2 * torch.roll(g.contiguous(), 1, dims=-1)


def test_a_backward_that_reads_grad_output_out_of_place_is_the_uniform_trap():
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    report = check_backward(ShiftedGradOutput, x, reference=lambda x: 2 * x)
    assert report.traps == ["assumes a uniform grad_output"], report
    assert "no single value of grad_output everywhere gives it" in str(report), report


class CrossEntropySum(torch.autograd.Function):
    """Cross-entropy over rows, summed, computed in float32 whatever the input's dtype (as a fused kernel does); its
    backward right. Grown to 1,025 classes, one element's step moves the float32 loss by less than its rounding."""
    @staticmethod
    def forward(ctx, logits, target):
        logp = torch.log_softmax(logits.float(), dim=-1)
        ctx.save_for_backward(logits, target)
        return (-logp.gather(1, target[:, None])).sum().to(logits.dtype)

    @staticmethod
    def backward(ctx, g):
        logits, target = ctx.saved_tensors
        p = torch.softmax(logits.float(), dim=-1)
        grad = p - torch.nn.functional.one_hot(target, logits.shape[-1]).float()
        return (grad * g.float()).to(logits.dtype), None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_float32_loss_over_many_classes_is_judged_along_directions(dtype):
    """With no reference, finite differences one element at a time hear only the float32 loss's rounding on the
    grown input (3 x 1025): the checker steps every element at once instead, and the right backward is clean, not
    'too noisy to decide' (nor, once, 'ignores grad_output')."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 20, generator=gen).to(dtype)
    target = torch.randint(0, 20, (3,), generator=gen)
    report = check_backward(CrossEntropySum, logits, target)
    assert report.headline == "clean", report
