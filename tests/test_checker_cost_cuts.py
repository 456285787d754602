"""What a check leaves out to cost less, and that leaving it out changes no verdict: the reference's rounding and
the op's own noise are worked out only where a gradient is not plainly right (checks/truth.py, Later), and an
element is judged against its rounding only where it is off by more than half its own value (Expected._suspects)."""
import math
import sys

import pytest
import torch
from chapter_scripts import DEVICE, REPO, seeded_randn

sys.path.insert(0, str(REPO / "practice"))
from backward_check.checks.context import Context  # noqa: E402
from backward_check.calling import packed, same_layout  # noqa: E402
from backward_check.checks.truth import Expected, Later, outputs_row  # noqa: E402
from backward_check.contracts import all_finite, finite_elements  # noqa: E402
from backward_check.report import Report  # noqa: E402
from backward_checker import check_backward  # noqa: E402


class Softplus(torch.autograd.Function):
    """softplus, with a backward off by `off` (relative) on the elements `wrong` picks (a slice of the flat ones)."""
    off, wrong = 0.0, slice(None)

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.nn.functional.softplus(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        scale = torch.ones_like(x).reshape(-1)
        scale[Softplus.wrong] += Softplus.off
        return grad * torch.sigmoid(x) * scale.reshape(x.shape)


def softplus_counting(dtypes):
    def reference(x):
        dtypes.append(x.dtype)
        return torch.nn.functional.softplus(x)
    return reference


@pytest.mark.parametrize("off, wrong, trap", [(0.0, slice(None), None), (0.01, slice(None), "a wrong formula"),
                                              (1.0, slice(2000, 2003), "a wrong formula")])
def test_the_reference_is_asked_for_its_rounding_only_where_a_gradient_is_not_plainly_right(off, wrong, trap,
                                                                                            monkeypatch):
    # A right float32 gradient is within its tolerance before the rounding widens it, so the reference is never run
    # in float32 (nor on TF32-rounded operands); a wrong one, over the whole gradient or in a few elements, is
    # judged beside that rounding, as before the cut, and named.
    monkeypatch.setattr(Softplus, "off", off)
    monkeypatch.setattr(Softplus, "wrong", wrong)
    dtypes = []
    report = check_backward(Softplus.apply, seeded_randn(64, 64, seed=3), reference=softplus_counting(dtypes))
    named = {f.trap.name for f in report.findings}
    if trap is None:
        assert report.clean, report
        assert torch.float32 not in dtypes, dtypes
    else:
        assert trap in named, report
        assert torch.float32 in dtypes, dtypes


@pytest.mark.parametrize("off, wrong, measured", [(0.0, slice(None), False), (0.01, slice(None), True)])
def test_the_ops_own_noise_is_measured_only_where_a_gradient_is_not_plainly_right(off, wrong, measured,
                                                                                   monkeypatch):
    # The op's own noise (six calls of the op) only widens what is allowed: a right op's check never measures it,
    # and a wrong one is judged beside it, as before the cut, and named.
    monkeypatch.setattr(Softplus, "off", off)
    monkeypatch.setattr(Softplus, "wrong", wrong)
    asked, measure = [], Context.own_noise.func

    def counted(context):
        asked.append(context.label)
        return measure(context)
    monkeypatch.setattr(Context, "own_noise", property(counted))  # (a property: asked each time, counted each time)
    report = check_backward(Softplus.apply, seeded_randn(64, 64, seed=3), reference=torch.nn.functional.softplus)
    assert report.clean is not measured, report
    assert bool(asked) is measured, asked


def judged(right, got, rounding, fine, noise, later):
    """An Expected of one argument's right gradient, its rounding given at once or worked out when asked, judged
    beside the op's own noise where there is one (settled where it is within a few ulps of the gradient), given at
    once or worked out when asked, as the rounding is."""
    if later:
        roundings, fines = Later(lambda: [rounding]), Later(lambda: [fine])
    else:
        roundings, fines = [rounding], [fine]
    expected = Expected([right], [None], [1e-4], roundings, fines, dtypes=[torch.float32])
    if noise is not None:
        settled = noise <= 2 * torch.finfo(torch.float32).eps * right.abs()
        noises, settleds = (Later(lambda: [noise]), Later(lambda: [settled])) if later else ([noise], [settled])
        expected = expected.judged_with(noises, settleds, [torch.float32])
    error = expected.error(got, 0, got.shape)
    return error <= 1.0, (error if error > 1.0 else None), expected.far_off(got, 0).tolist()


def far_off_by_the_whole_rule(right, got, fine, noise):
    """Each element judged by the rule in full (Expected.far_off's docstring), with no element screened out first."""
    expected = Expected([right], [None], [1e-4], [fine], [fine], dtypes=[torch.float32])
    if noise is not None:
        settled = noise <= 2 * torch.finfo(torch.float32).eps * right.abs()
        expected = expected.judged_with([noise], [settled], [torch.float32])
    d = (got - right).abs()
    allowed = 0.5 * right.abs() + expected.local_rounding(0, right, fine) + expected.floor
    return (~(d <= allowed)).tolist()


@pytest.mark.parametrize("seed", range(200))
def test_a_rounding_worked_out_when_asked_gives_every_verdict_the_one_given_at_once_gives(seed):
    # Gradients right, right within their rounding only, a few elements off by about half their value, and
    # cancelling elements near 0 beside rounding larger than them, at scales drawn around each rule's edge: the
    # error's verdict and each element's are the same whether the reference's rounding (and its TF32 rounding, at
    # least as large) is given at once or only when the cheaper bound cannot decide.
    generator = torch.Generator().manual_seed(seed)

    def uniform(low, high):
        return low + (high - low) * torch.rand((), generator=generator, dtype=torch.float64).item()

    n = 64
    right = torch.randn(n, generator=generator, dtype=torch.float64)
    right[:8] *= 10.0 ** -torch.randint(3, 9, (8,), generator=generator)
    near_the_tolerance = seed % 4 == 0  # the whole gradient off by about its tolerance, 1e-4, rounding far below it
    rounding = (torch.rand(n, generator=generator, dtype=torch.float64) * right.abs().max()
                * 10 ** (uniform(-9, -7) if near_the_tolerance else uniform(-6, -3)))
    fine = torch.maximum(rounding, torch.rand(n, generator=generator, dtype=torch.float64) * rounding.max() * 4)
    relative = (torch.randn(n, generator=generator, dtype=torch.float64)
                * 10 ** (uniform(-4.3, -3.7) if near_the_tolerance else uniform(-6, 0.5)))
    picked = torch.rand(n, generator=generator) < (1.0 if near_the_tolerance else uniform(0.02, 1.0))
    got = right + relative * right.abs() * picked
    # in a third of the draws, the elements near 0 off by about their rounding, which decides them (elsewhere every
    # element is off by its share of its own value, so the screen alone decides whether any is looked at further)
    if seed % 3 == 0:
        got[:8] += torch.randn(8, generator=generator, dtype=torch.float64) * fine[:8] * 10 ** uniform(0, 2.5)
    got = got.to(DEVICE)
    noise = None
    if seed % 2:  # the op's own noise: in half of these draws near the tolerance, so that it decides some verdicts
        scale = uniform(-5, -3.5) if seed % 4 == 1 else -7
        noise = (torch.rand(n, generator=generator, dtype=torch.float64) * 10 ** scale * right.abs()).to(DEVICE)
    given = judged(right.to(DEVICE), got, rounding.to(DEVICE), fine.to(DEVICE), noise, later=False)
    asked = judged(right.to(DEVICE), got, rounding.to(DEVICE), fine.to(DEVICE), noise, later=True)
    assert given == asked
    assert given[2] == far_off_by_the_whole_rule(right.to(DEVICE), got, fine.to(DEVICE), noise)


def test_a_later_value_is_worked_out_once_and_only_when_asked():
    calls = []
    later = Later(lambda: calls.append(1) or [1.0, 2.0])
    assert not later.known and not calls
    assert later[1] == 2.0 and list(later) == [1.0, 2.0] and len(later) == 2
    assert later.known and calls == [1]


@pytest.mark.parametrize("values, finite", [
    ([1.0, -2.0, 3.0], True),
    ([1e308, 1e308, -1e308], True),         # finite elements whose sum overflows: told by isfinite
    ([1.0, float("nan"), 2.0], False),
    ([float("inf"), float("-inf")], False),  # infinities that cancel to NaN in a sum
    ([1.0, float("inf")], False),
    ([], True),
])
def test_all_finite_is_isfinite_told_by_a_sum(values, finite):
    # all_finite reads a sum first (a NaN or an infinity carries through it) and asks isfinite only where the sum is
    # not finite: every case gives what isfinite gives, in float64 and, where the values fit, in float16.
    t = torch.tensor(values, dtype=torch.float64, device=DEVICE)
    assert all_finite(t) is finite is bool(t.isfinite().all())
    assert all_finite(t, torch.ones(3, device=DEVICE)) is finite
    if all(abs(v) < 6e4 or not math.isfinite(v) for v in values):  # summed in float64: no overflow
        assert all_finite(torch.tensor(values * 3000, dtype=torch.float16, device=DEVICE)) is finite
    assert finite_elements(t).tolist() == t[t.isfinite()].tolist()


def found_by_the_whole_rule(t):
    """contracts.found before its probes: every property from a pass over every element (its docstring's rule)."""
    from backward_check.contracts import (
        LATTICE_COARSER,
        NOTHING,
        SORTED_COMPARISONS,
        Contract,
        tolerance,
    )
    if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.numel() < 2:
        return NOTHING
    x = t.detach().double()
    if not bool(x.isfinite().all()):
        return NOTHING
    tol = tolerance(t.dtype)
    largest = x.abs().max().item()
    if largest == 0.0:
        return NOTHING
    square = x.dim() >= 2 and x.shape[-1] == x.shape[-2] >= 2
    symmetric = square and (x - x.transpose(-1, -2)).abs().max().item() <= tol * largest
    positive_definite = symmetric and bool((torch.linalg.cholesky_ex(x).info == 0).all())
    row = x.shape[-1]
    rows_sum_to_one = row >= 2 and bool(((x.sum(dim=-1) - 1).abs() <= tol).all())
    unit_rows = row >= 2 and not rows_sum_to_one and bool(((x.norm(dim=-1) - 1).abs() <= tol).all())
    steps = x.diff(dim=-1)
    sorted_ = 0
    if x.numel() - x.numel() // row >= SORTED_COMPARISONS and bool((steps != 0).any()):
        sorted_ = 1 if bool((steps >= 0).all()) else -1 if bool((steps <= 0).all()) else 0
    non_negative = x.min().item() >= 0.0 and x.max().item() > x.min().item()
    smallest, biggest = x.min().item(), x.max().item()
    coarse = LATTICE_COARSER * torch.finfo(t.dtype).eps * max(abs(smallest), abs(biggest)) > 1.0
    step = 0.0 if smallest == biggest or coarse else float(bool((x == x.round()).all()))
    return Contract(symmetric=symmetric, positive_definite=positive_definite, rows_sum_to_one=rows_sum_to_one,
                    unit_rows=unit_rows, sorted=sorted_, step=step, non_negative=non_negative,
                    unit_interval=non_negative and largest <= 1.0,
                    smallest=torch.linalg.eigvalsh(x).min().item() if positive_definite else 0.0,
                    diagonal=x.diagonal(dim1=-2, dim2=-1).max().item() if positive_definite else 0.0)


def values_near_each_contract(seed):
    """A tensor that holds one property, or holds it everywhere but past its first row (or its first 64 values, or
    one mirrored pair past the first row and column), where a probe of the first part alone would be fooled."""
    generator = torch.Generator().manual_seed(seed)
    kind, spoiled = seed % 6, seed % 12 >= 6
    rows, n = 3 + seed % 5, 6 + seed % 70
    dtype = (torch.float32, torch.float64, torch.float16)[seed % 3]
    x = torch.randn(rows, n, generator=generator, dtype=torch.float64)
    if kind == 0:  # symmetric
        x = torch.randn(2, n, n, generator=generator, dtype=torch.float64)
        x = x + x.transpose(-1, -2)
        if spoiled:
            x[1, n - 1, n - 2] += 1.0
    elif kind == 1:  # rows that sum to 1
        x = x.exp()
        x = x / x.sum(dim=-1, keepdim=True)
    elif kind == 2:  # rows of unit norm
        x = x / x.norm(dim=-1, keepdim=True)
    elif kind == 3:  # sorted, ascending or descending
        x = x.sort(dim=-1, descending=bool(seed % 4 == 3)).values
        if spoiled:
            x[-1, [0, -1]] = x[-1, [-1, 0]]
    elif kind == 4:  # integers: a lattice
        x = torch.randint(0, 50, (rows, n), generator=generator).double()
        if spoiled:
            x.view(-1)[-1] += 0.5
    else:  # non-negative, within [0, 1]
        x = torch.rand(rows, n, generator=generator, dtype=torch.float64)
    if spoiled and kind in (1, 2):
        x[-1] *= 1.5
    x = x.to(dtype)
    return x.transpose(-1, -2) if seed % 5 == 4 else x  # laid out otherwise: the same values, another layout


@pytest.mark.parametrize("seed", range(120))
def test_a_contract_found_with_probes_first_is_the_one_the_whole_rule_finds(seed):
    # The first row (or the first values, or the first row against the first column) is looked at before every
    # element: where a property is lacking only past it, the whole rule still decides.
    from backward_check.contracts import found
    x = values_near_each_contract(seed).to(DEVICE)
    assert found(x) == found_by_the_whole_rule(x)


def test_a_contract_is_found_once_a_run_for_each_tensor_and_again_after_it_changes(monkeypatch):
    from backward_check import contracts
    worked_out, whole = [], contracts._found
    monkeypatch.setattr(contracts, "_found", lambda t: worked_out.append(t) or whole(t))
    x = torch.rand(4, 4, device=DEVICE)
    with contracts.remembered():
        first = contracts.found(x)
        assert contracts.found(x) is first and len(worked_out) == 1
        assert contracts.found(x.clone()) == first and len(worked_out) == 2  # another tensor: found again
        x.add_(-0.5)  # no longer non-negative: its version moved, so it is found again
        assert contracts.found(x) != first and len(worked_out) == 3
    contracts.found(x)
    assert len(worked_out) == 4  # outside a run, nothing is remembered


def packed_by_the_loop(t):
    """packed() as it was before it answered a contiguous tensor at once: the strides read one by one."""
    if any(stride == 0 for stride in t.stride()):
        return True
    expected = 1
    for size, stride in sorted(((size, stride) for size, stride in zip(t.shape, t.stride()) if size > 1),
                               key=lambda pair: pair[1]):
        if stride != expected:
            return False
        expected *= size
    return True


def test_a_contiguous_tensor_is_packed_at_once_as_the_loop_says_and_a_nested_one_goes_the_loops_way():
    base = torch.randn(6, 8, 4)
    cases = [base, base[:, :4], base[::2], base.transpose(0, 2), base[:1], base[2, 3, 1], base.expand(2, 6, 8, 4),
             torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last),
             torch.randn(1, 8).as_strided((1, 8), (999, 1)), torch.randn(20).as_strided((4,), (5,))]
    for t in cases:
        assert packed(t) is packed_by_the_loop(t), (tuple(t.shape), t.stride())
    # An empty view is contiguous by torch's rule and not by the loop's; either way its copy has its strides.
    empty = base[:, :0]
    assert same_layout(empty).stride() == empty.stride()
    # A nested tensor is contiguous but has no strides to read: the check ends as before the cut, in a report (what
    # it says of a nested input is not this test's to hold), not in a traceback of the checker's.
    x = torch.nested.nested_tensor([torch.randn(2, 4), torch.randn(3, 4)], layout=torch.jagged)

    class Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    assert isinstance(check_backward(Double, x), Report)


class Wrapped(torch.Tensor):
    """A tensor subclass, concatenated as every output was before the cut."""


@pytest.mark.parametrize("make", [
    lambda: torch.randn(3, 5),                                            # float32: flat() copies
    lambda: torch.randn(3, 5, dtype=torch.float64),                       # float64 and contiguous: flat() is a view
    lambda: torch.randn(20, dtype=torch.float64).as_strided((1,), (5,)),  # a view with an odd stride
    lambda: torch.randn(5, 3, dtype=torch.float64).t(),                   # transposed: flat() copies
    lambda: torch.tensor(2.5, dtype=torch.float64),                       # 0-dim
    lambda: torch.randn(3, 5, dtype=torch.float64).as_subclass(Wrapped),
], ids=["float32", "float64", "strided view", "transposed", "0-dim", "subclass"])
def test_one_outputs_row_is_torch_cats_in_memory_of_its_own(make):
    out = make()
    before = out.detach().clone()
    row = outputs_row([out])
    assert torch.equal(row, torch.cat([out.detach().double().reshape(-1)]))
    row.add_(1.0)  # finite differences write in the row: never in the op's output
    assert torch.equal(out, before)
