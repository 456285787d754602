"""The backward checker against its zoos (tests/checker_zoo.py, checker_zoo_planted.py, and checker_zoo_blind.py,
written by someone who had read neither): legal code must come back clean, and each planted bug must be named with
exactly its trap, with and without a reference.

Every test here runs with torch's default device set to "meta": a tensor the checker makes without the device of
the op's tensors then lands on the meta device and fails, on a CPU as on a GPU (where such a tensor lands on the
CPU, beside the op's on cuda:0)."""
import sys

import pytest
import torch
from chapter_scripts import REPO, scripts_defining, seeded_randn
from checker_zoo import LEGAL, LEGAL_WITHOUT_REFERENCE, gelu, one_input, square, x35
from checker_zoo_blind import BLIND_ALSO, BLIND_LEGAL, BLIND_PLANTED, BLIND_UNDECIDABLE
from checker_zoo_planted import MULTIPLE, PLANTED, PLANTED_WITHOUT_REFERENCE

sys.path.insert(0, str(REPO / "practice"))
from backward_checker import check_backward  # noqa: E402
from backward_check.report import WASTED_GRADIENT, WIDER_GRADIENT  # noqa: E402


@pytest.fixture(autouse=True)
def another_default_device():
    """torch's default device is not the op's: the checker must make every tensor on the op's device."""
    with torch.device("meta"):
        yield


@pytest.mark.parametrize("case", list(LEGAL))
def test_legal_code_gets_a_clean_report(case):
    op, args, kwargs, reference = LEGAL[case]
    report = check_backward(op, *args, reference=reference, **kwargs)
    assert report.clean and not report.inconclusive, str(report)
    assert "random grad_output" in report.passed, str(report)


@pytest.mark.parametrize("case", list(LEGAL_WITHOUT_REFERENCE))
def test_legal_code_is_clean_against_finite_differences(case):
    op, args, kwargs = LEGAL_WITHOUT_REFERENCE[case]
    report = check_backward(op, *args, **kwargs)
    assert report.clean, str(report)


@pytest.mark.parametrize("case", list(PLANTED))
def test_a_planted_bug_is_named_with_its_trap(case):
    op, args, kwargs, reference, trap = PLANTED[case]
    report = check_backward(op, *args, reference=reference, **kwargs)
    assert report.traps == [trap], str(report)


@pytest.mark.parametrize("case", PLANTED_WITHOUT_REFERENCE)
def test_a_planted_bug_is_named_without_a_reference(case):
    op, args, kwargs, _, trap = PLANTED[case]
    report = check_backward(op, *args, **kwargs)
    assert report.traps == [trap], str(report)


@pytest.mark.parametrize("case", list(MULTIPLE))
def test_an_op_with_several_traps_is_named_with_every_one(case):
    """A finding never silences a check for another trap: a by-design write does not hide a uniform grad_output."""
    op, args, kwargs, reference, traps = MULTIPLE[case]
    report = check_backward(op, *args, reference=reference, **kwargs)
    assert sorted(report.traps) == sorted(traps), str(report)


@pytest.mark.parametrize("case", list(BLIND_LEGAL))
def test_legal_code_written_blind_gets_a_clean_report(case):
    op, args, kwargs, reference, options = BLIND_LEGAL[case]
    report = check_backward(op, *args, reference=reference, **options, **kwargs)
    assert report.clean, str(report)
    assert report.decided or case in BLIND_UNDECIDABLE, str(report)


@pytest.mark.parametrize("case", list(BLIND_PLANTED))
def test_a_bug_planted_blind_is_named_with_its_trap(case):
    op, args, kwargs, reference, options, trap = BLIND_PLANTED[case]
    report = check_backward(op, *args, reference=reference, **options, **kwargs)
    assert sorted(report.traps) == sorted([trap, *BLIND_ALSO.get(case, ())]), str(report)


def test_notes_say_what_pytorch_accepts_but_wastes():
    op, args, kwargs, reference = LEGAL["a gradient returned where none is needed"]
    assert any("throws it away" in n for n in check_backward(op, *args, reference=reference).noted(WASTED_GRADIENT))
    op, args, kwargs, reference = LEGAL["a float64 gradient for a float32 input"]
    assert any("torch.float64 gradient" in n for n in check_backward(op, *args, reference=reference).noted(WIDER_GRADIENT))


def chapter_functions():
    return [pytest.param(getattr(p.values[0], name), ref, id=f"{p.id}-{name}")
            for name, ref in (("TritonGELU", gelu), ("TritonSquare", square)) for p in scripts_defining(name)]


@pytest.mark.parametrize("op, reference", chapter_functions())
def test_the_books_functions_are_flagged_only_for_a_transposed_input(op, reference):
    """The listings feed the saved x to the kernel as it is: right for every grad_output autograd hands
    on, wrong for x.t() (docs/differences.md shows the same from tools/listing_failures.py)."""
    report = check_backward(op, seeded_randn(3, 5, seed=81), reference=reference)
    assert report.traps == ["assumes a contiguous input"], str(report)
    assert {"random grad_output", "the layouts autograd hands on", "writes in the backward"} <= set(report.passed)


def test_the_callers_tensors_are_never_touched():
    op, args, kwargs, reference, _ = PLANTED["forward writes into its logits (Liger-Kernel cross-entropy)"]
    kept = [a.clone() for a in args]
    check_backward(op, *args, reference=reference)
    assert all(torch.equal(a, k) for a, k in zip(args, kept))


def test_a_silently_wrong_second_derivative_is_named_only_when_asked():
    book = chapter_functions()[0].values[0]  # the book's TritonGELU: its kernel's output carries no graph
    x = seeded_randn(3, 5, seed=80)
    assert "a silently wrong second derivative" not in check_backward(book, x, reference=gelu).traps
    report = check_backward(book, x, reference=gelu, second_order=True)
    assert "a silently wrong second derivative" in report.traps, str(report)


@pytest.mark.parametrize("case", ["hardened TritonGELU", "hardened TritonSquare", "torch ops inside",
                                  "create_graph refused, its reference without a double backward",
                                  "torch ops inside, in bfloat16"])
def test_a_refused_or_right_double_backward_is_clean(case):
    op, args, kwargs, reference = LEGAL[case]
    report = check_backward(op, *args, reference=reference, second_order=True, **kwargs)
    assert report.clean and "create_graph=True" in report.passed, str(report)



def test_a_cache_filled_before_the_check_is_named_as_state():
    """A derivative cached by shape, filled by a call before the checker ran: wrong from the checker's first
    call, right on a shape the op has not seen, so kept state, not a wrong formula."""
    from checker_zoo_blind import CubeCachedDerivative
    op, args, kwargs, reference, options, trap = BLIND_PLANTED["cube_derivative_cached_on_class"]
    earlier = seeded_randn(*args[0].shape, seed=99).requires_grad_(True)
    (CubeCachedDerivative.apply(earlier) * 1.0).sum().backward()
    report = check_backward(op, *args, reference=reference, **options, **kwargs)
    assert report.traps == ["keeps state between calls"], str(report)


@pytest.mark.parametrize("scale, verdict", [(1 + 2.5e-4, "undecided"), (1 + 5e-3, "a wrong formula")])
def test_a_gradient_only_just_past_its_tolerance_is_undecided_not_a_trap(scale, verdict):
    """Off by a little more than float32's tolerance (a kernel's own precision can do that) is a ?? line;
    off by far more than four tolerances is a trap, named by the ladder as before."""
    op = one_input(square, lambda x, g: 2 * x * g * scale, "SquareSlightlyOff")
    report = check_backward(op, x35(), reference=square)
    if verdict == "undecided":
        assert report.clean and any("just past" in line for line in report.inconclusive), str(report)
    else:
        assert report.traps == [verdict], str(report)


@pytest.mark.parametrize("rows, classes, dtype, seed", [
    (4, 7, torch.float64, 61),      # within one block
    (3, 1030, torch.float32, 62),   # one block past it
    (2, 2600, torch.float32, 63),   # several blocks and a tail
    (6, 300, torch.float64, 64),
])
def test_a_token_scaled_loss_reading_grad_output_0_is_named_at_every_size(rows, classes, dtype, seed):
    """The rule that names a gradient reading grad_output[0] where it is off finite differences for a uniform
    grad_output too (a scale held constant by design), as a property of the op: across sizes, dtypes and draws, the
    planted twin is named for it without a reference, and the per-row fix never is."""
    from checker_zoo_planted import ScaledRowLoss, ScaledRowLossFirstScale
    logits = seeded_randn(rows, classes, seed=seed, dtype=dtype)
    target = torch.randint(0, classes, (rows,), generator=torch.Generator(device="cpu").manual_seed(seed),
                           device="cpu").to(logits.device)
    buggy = check_backward(ScaledRowLossFirstScale, logits, target)
    assert buggy.traps == ["assumes a uniform grad_output"], str(buggy)
    fixed = check_backward(ScaledRowLoss, logits, target)
    assert "assumes a uniform grad_output" not in fixed.traps, str(fixed)


def test_a_by_design_gradient_read_per_row_is_not_called_uniform():
    """A gradient that holds a scale constant by design (Liger-Kernel's token scaling) is off finite differences
    for every grad_output; read per row it is no uniform grad_output's bug, whatever else the check says of it, and
    beside the library's own reference (the scale detached) it is clean. Its planted twin, which reads
    grad_output[0] for every row, is named for that without a reference (PLANTED_WITHOUT_REFERENCE)."""
    from checker_zoo_planted import ScaledRowLoss, scaled_row_loss
    from checker_zoo import logits_and_target
    report = check_backward(ScaledRowLoss, *logits_and_target())
    assert "assumes a uniform grad_output" not in report.traps, str(report)
    assert "a wrong formula" in report.traps, str(report)
    assert check_backward(ScaledRowLoss, *logits_and_target(), reference=scaled_row_loss).clean
