"""The contract of the values given (backward_check/contracts.py): the properties found from an input's values,
kept by every value the checker makes up (grown past several blocks, jittered), stepped within by finite
differences, and, for a symmetric matrix, the gradient compared by its symmetric part. A library in the shape of
linear_operator's (tests/checker_zoo_contracts.py) comes back clean at every size, with a reference and without,
and a bug planted in it is still named."""
import sys

import pytest
import torch
from chapter_scripts import DEVICE, REPO, seeded_randn
from checker_zoo_contracts import (LEGAL, PLANTED, CountsTimesRate, Gaps, LogOfProbabilities, counts_and_rate,
                                   log_of_normalised, probabilities, sorted_edges, spd, sym)

sys.path.insert(0, str(REPO / "practice"))
from backward_check import contracts, strategies  # noqa: E402
from backward_check.calling import Slot  # noqa: E402
from backward_check.report import CONTRACT  # noqa: E402
from backward_checker import check_backward  # noqa: E402

@pytest.fixture(autouse=True)
def another_default_device():
    """torch's default device is not the op's (as in test_checker_zoo.py): the checker must make every tensor on
    the op's device."""
    with torch.device("meta"):
        yield


# A symmetric matrix under a block (3 x 3, 31 x 31), one past it (33 x 33), several blocks with a tail (70 x 70,
# too large to grow): the first three are grown past several blocks too.
SIZES = (3, 31, 33, 70)
# Without a reference: column by column (3 x 3), and along random directions (70 x 70).
DIFFERENCED_SIZES = (3, 70)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("case", list(LEGAL))
def test_a_symmetric_positive_definite_library_is_clean_with_a_reference(case, n):
    op, inputs, reference = LEGAL[case]
    report = check_backward(op, *inputs(n, seed=n), reference=reference)
    assert report.clean and report.decided, str(report)
    if n < 70:
        assert "grown to" in report.checked, str(report)   # the grown matrix is positive-definite: the op takes it


@pytest.mark.parametrize("n", DIFFERENCED_SIZES)
@pytest.mark.parametrize("case", list(LEGAL))
def test_a_symmetric_positive_definite_library_is_clean_against_finite_differences(case, n):
    op, inputs, _ = LEGAL[case]
    report = check_backward(op, *inputs(n, seed=n))
    assert report.clean and report.decided, str(report)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("case", list(PLANTED))
def test_a_bug_planted_in_it_is_named_with_a_reference(case, n):
    op, inputs, reference, trap = PLANTED[case]
    report = check_backward(op, *inputs(n, seed=n), reference=reference)
    assert report.traps == [trap], str(report)


@pytest.mark.parametrize("n", DIFFERENCED_SIZES)
@pytest.mark.parametrize("case", list(PLANTED))
def test_a_bug_planted_in_it_is_named_against_finite_differences(case, n):
    op, inputs, _, trap = PLANTED[case]
    report = check_backward(op, *inputs(n, seed=n))
    assert report.traps == [trap], str(report)


def test_the_report_says_what_it_kept_and_compared():
    op, inputs, reference = LEGAL["a Cholesky solve, its gradient for A symmetrized"]
    note, = check_backward(op, *inputs(3), reference=reference).noted(CONTRACT)
    assert note.startswith("`a` is symmetric, positive-definite") and "(G + G^T) / 2" in note, note


# -- the properties, found ----------------------------------------------------------------

def test_each_property_is_found_from_the_values():
    a, _ = spd(5)
    assert contracts.found(a).names == ["symmetric", "positive-definite"]
    indefinite = a - 3 * torch.eye(5, dtype=a.dtype, device=DEVICE)
    assert contracts.found(indefinite).names == ["symmetric"]
    assert contracts.found(probabilities(4, 6)).names == ["rows that sum to 1", "within [0, 1]"]
    rows = seeded_randn(4, 6, seed=1)
    assert contracts.found(rows / rows.norm(dim=-1, keepdim=True)).names == ["rows of unit norm"]
    assert contracts.found(sorted_edges(3, 5)).names == ["sorted along its last dimension"]
    assert contracts.found(sorted_edges(3, 5).flip(-1)).names == ["sorted in descending order along its last dimension"]
    assert contracts.found(seeded_randn(4, 6, seed=13).mul(3).round()).names == ["integers"]
    assert contracts.found(seeded_randn(4, 6, seed=3).abs() + 2).names == ["non-negative"]
    assert contracts.found(torch.rand(4, 6, generator=torch.Generator().manual_seed(0), device="cpu").to(DEVICE)).names == \
        ["within [0, 1]"]


@pytest.mark.parametrize("values", [
    seeded_randn(4, 6, seed=4),                                  # nothing
    torch.ones(6, device=DEVICE),                                # a constant says nothing of a range
    seeded_randn(2, 2, seed=8),                                  # a row of two, sorted by chance: too few to count
])
def test_values_with_no_contract_have_none(values):
    assert contracts.found(values) == contracts.NOTHING, contracts.found(values).names


@pytest.mark.parametrize("values", [
    seeded_randn(3, 5, seed=5) + 1e4,                            # float32 near 1e4: its own spacing is no lattice
    seeded_randn(4, 6, seed=6).bfloat16().float(),               # bfloat16 numbers in float32: no lattice either
    (1 + 0.1 * seeded_randn(8, seed=7)).bfloat16(),              # a bfloat16 weight near 1
    seeded_randn(20, seed=2).mul(4).round().div(4),              # quarters: round numbers, no index
    torch.tensor([[0.6, 0.8], [0.9, 0.4]], device=DEVICE),       # tenths: a covariance factor as a test writes it
])
def test_a_dtypes_own_spacing_is_no_lattice(values):
    assert not contracts.found(values).lattice, contracts.found(values).names


# -- the properties, kept ------------------------------------------------------------------

def grown(*values):
    slots = [Slot(i, f"arg{i}", v) for i, v in enumerate(values)]
    plans, why = strategies.growth_plans(list(values), slots, list(range(len(values))))
    assert plans, why
    return [strategies.grow(list(values), plan) for plan in plans]


@pytest.mark.parametrize("shape", [(3, 3), (31, 31), (33, 33), (2, 5, 5)])
def test_a_grown_symmetric_positive_definite_matrix_stays_so(shape):
    """Grown (tiled: singular) and jittered, then symmetrized and its diagonal raised: every plan keeps it square,
    symmetric and positive-definite, past several blocks, holding the given values' regime off the diagonal."""
    a, b = spd(shape[-1], seed=shape[-1])
    a = a.expand(*shape).contiguous() if len(shape) == 3 else a
    for values in grown(a):
        big = values[0]
        assert big.shape[-1] == big.shape[-2] and big.numel() > 3 * 1024, big.shape
        assert torch.equal(big, big.transpose(-1, -2))
        assert bool((torch.linalg.cholesky_ex(big).info == 0).all())
        assert torch.linalg.eigvalsh(big).min() >= torch.linalg.eigvalsh(a).min() * (1 - 1e-9)


@pytest.mark.parametrize("points", [12, 50])
def test_a_grown_kernel_matrix_stays_positive_definite_and_within_0_and_1(points):
    """An RBF kernel matrix (gpytorch's, linear_operator's tests' own): within [0, 1], its diagonal 1. Grown and
    jittered, it is drawn toward the identity, not shifted past 1, so it keeps both."""
    x = torch.randn(points, 3, generator=torch.Generator().manual_seed(points), device="cpu")
    kernel = (x[:, None, :] - x[None, :, :]).pow(2).sum(dim=-1).mul(-1.0).exp().to(DEVICE)
    assert contracts.found(kernel).names == ["symmetric", "positive-definite", "within [0, 1]"]
    for values in grown(kernel) + [[strategies.jittered(kernel, "other values")]]:
        assert contracts.found(values[0]).names == contracts.found(kernel).names, values[0].shape


@pytest.mark.parametrize("make, keeps", [
    (lambda: probabilities(3, 5), lambda t: torch.allclose(t.sum(-1), torch.ones_like(t.sum(-1)))),
    (lambda: seeded_randn(3, 5, seed=9) / seeded_randn(3, 5, seed=9).norm(dim=-1, keepdim=True),
     lambda t: torch.allclose(t.norm(dim=-1), torch.ones_like(t.norm(dim=-1)))),
    (lambda: sorted_edges(3, 5), lambda t: bool((t.diff(dim=-1) >= 0).all())),
    (lambda: counts_and_rate(3, 5)[0], lambda t: torch.equal(t, t.round())),
])
def test_grown_and_jittered_values_keep_the_given_ones_property(make, keeps):
    given = make()
    for values in grown(given) + [[strategies.jittered(given, "other values")]]:
        assert keeps(values[0]) and contracts.found(values[0]).names == contracts.found(given).names


def test_a_property_no_made_up_values_can_keep_leaves_the_check_undecided():
    """A symmetric matrix whose rows sum to 1 (doubly stochastic): symmetrizing undoes the rows' sums. The
    checker names the property it could not keep, decides nothing on grown inputs, and calls nothing wrong."""
    p = torch.full((5, 5), 0.1, dtype=torch.float64, device=DEVICE) + 0.5 * torch.eye(5, dtype=torch.float64,
                                                                                      device=DEVICE)
    p[0, 1] = p[1, 0] = 0.05
    p[0, 0] = p[1, 1] = 0.65
    assert contracts.found(p).symmetric and contracts.found(p).rows_sum_to_one
    def sine(p):
        return torch.sin(p)
    report = check_backward(sine, p, reference=sine)
    assert report.clean and any("could not make values of `p` that keep what the given ones hold: rows that sum "
                                "to 1" in u for u in report.inconclusive), str(report)


# -- steps within the contract, and what is compared ---------------------------------------

@pytest.mark.parametrize("shape", [(4, 6), (40, 30)])
def test_rows_that_sum_to_one_are_compared_by_the_part_that_keeps_the_sum(shape):
    """log p with the backward g / p, against log(p / sum p): the two gradients differ by a constant per row,
    which rows that sum to 1 never feel. Clean with the reference and without, at a block and past several;
    a backward off by a factor is still named."""
    p = probabilities(*shape, seed=shape[0])
    assert check_backward(LogOfProbabilities, p, reference=log_of_normalised).clean
    report = check_backward(LogOfProbabilities, p)
    assert report.clean and report.decided, str(report)
    wrong = type("LogOfProbabilitiesHalved", (torch.autograd.Function,), {
        "forward": staticmethod(LogOfProbabilities.forward),
        "backward": staticmethod(lambda ctx, g: LogOfProbabilities.backward(ctx, g) / 2)})
    assert check_backward(wrong, p, reference=log_of_normalised).traps == ["a wrong formula"]


def test_sorted_values_grow_sorted():
    """An op that refuses unsorted edges is checked on grown edges too: before, the grown values (tiled and
    jittered) were unsorted, and it refused them."""
    edges = sorted_edges(3, 7)
    report = check_backward(Gaps, edges, reference=lambda e: e.diff(dim=-1))
    assert report.clean and report.decided and "grown to" in report.checked, str(report)


def test_a_float_on_a_lattice_is_never_stepped():
    """Whole-number counts in a float tensor: with a reference, checked on grown counts (still whole); without
    one, finite differences leave the counts alone and say so (the rate is still judged, and a wrong rate
    gradient still named)."""
    counts, rate = counts_and_rate(3, 5)
    report = check_backward(CountsTimesRate, counts, rate, reference=lambda c, r: c * r)
    assert report.clean and report.decided and "grown to" in report.checked, str(report)
    report = check_backward(CountsTimesRate, counts, rate, grow=False)
    assert report.clean and any("`counts` holds only integers" in u for u in report.inconclusive), str(report)
    wrong = type("CountsTimesRateWrong", (torch.autograd.Function,), {
        "forward": staticmethod(CountsTimesRate.forward),
        "backward": staticmethod(lambda ctx, g: (g * ctx.saved_tensors[1], 2 * g * ctx.saved_tensors[0]))})
    assert check_backward(wrong, counts, rate, grow=False).traps == ["a wrong formula"]


class ScaleByFactor(torch.autograd.Function):
    """x @ factor, as a covariance factor enters a low-rank covariance: both take a gradient."""
    @staticmethod
    def forward(ctx, x, factor):
        ctx.save_for_backward(x, factor)
        return x @ factor

    @staticmethod
    def backward(ctx, g):
        x, factor = ctx.saved_tensors
        return g @ factor.T, x.T @ g


def test_round_values_that_are_not_integers_are_differenced():
    """A factor a test writes by hand, tenths (0.6, 0.8, 0.9, 0.4), is no index: finite differences step it, so
    its gradient is judged, and a wrong one named. Before, tenths were 'a lattice' left alone, and the wrong
    factor gradient went undecided."""
    x = seeded_randn(3, 2, seed=21).double()
    factor = torch.tensor([[0.6, 0.8], [0.9, 0.4]], dtype=torch.float64, device=DEVICE)
    report = check_backward(ScaleByFactor, x, factor, grow=False)
    assert report.clean and report.decided, str(report)
    wrong = type("ScaleByFactorWrong", (torch.autograd.Function,), {
        "forward": staticmethod(ScaleByFactor.forward),
        "backward": staticmethod(lambda ctx, g: (g @ ctx.saved_tensors[1].T, ctx.saved_tensors[0].T @ g / 2))})
    assert check_backward(wrong, x, factor, grow=False).traps == ["a wrong formula"]


def test_a_symmetric_direction_measures_the_symmetric_part():
    """Along a symmetric direction, finite differences give the symmetric part of the gradient: the general
    gradient of a solve and its symmetric part agree there, to finite differences' precision."""
    a, b = spd(4, seed=4)
    x = torch.linalg.solve(a, b)
    g = seeded_randn(4, 2, seed=11).double()
    general = -torch.linalg.solve(a, g) @ x.T
    u = sym(seeded_randn(4, 4, seed=12).double())
    h = 1e-6
    along = ((g * torch.linalg.solve(a + h * u, b)).sum() - (g * torch.linalg.solve(a - h * u, b)).sum()) / (2 * h)
    assert abs(along - (sym(general) * u).sum()) < 1e-8 and abs(along - (general * u).sum()) < 1e-8
    assert contracts.found(a).project(general, a).allclose(sym(general))
