"""A large input is checked whole where its size can matter, and on a slice of its first rows for the rest
(strategies.slice_plan, runner.WHOLE): the slice keeps the signature (dtypes, ranks, layouts, rows whole), every
tensor that shares the rows is cut with them, nothing that may index the rows or name their count is, and a planted
bug of every check the slice takes over is still named, with its trap, at a size past the slice's threshold."""
import sys

import pytest
import torch
from chapter_scripts import DEVICE, REPO, seeded_randn
from checker_zoo import square
from checker_zoo_planted import PLANTED, cross_entropy_rows

sys.path.insert(0, str(REPO / "practice"))
from backward_check import runner, strategies  # noqa: E402
from backward_check.calling import Slot  # noqa: E402
from backward_checker import check_backward  # noqa: E402

SLICE_FROM, SLICED_NUMEL = strategies.SLICE_FROM, strategies.SLICED_NUMEL


def slots(*names):
    return [Slot(i, name, None) for i, name in enumerate(names)]


def test_a_large_input_is_cut_to_its_first_rows_and_a_loss_target_with_them():
    x = torch.zeros(1000, 1000)
    target = torch.randint(0, 128, (1000,))
    plan, _ = strategies.slice_plan([x, target, "mean"], slots("x", "target", "reduction"), [0])
    rows = -(-SLICED_NUMEL // 1000)
    assert plan == {0: [(0, rows)], 1: [(0, rows)]}
    cut = strategies.sliced([x, target, "mean"], plan)
    assert cut[0].shape == (rows, 1000) and cut[1].shape == (rows,) and cut[2] == "mean"


def test_leading_dimensions_are_cut_in_turn_and_the_last_never():
    q = torch.zeros(4, 8, 256, 64)  # batch, heads, positions, features: the batch alone cannot cut it enough
    plan, _ = strategies.slice_plan([q], slots("q"), [0])
    assert plan == {0: [(0, 2), (1, 2), (2, 64)]}, plan  # two at least of each, never one: one hides its stride
    row = torch.zeros(4, SLICE_FROM)  # four rows, each past the slice's size: nothing can be cut enough
    assert strategies.slice_plan([row], slots("row"), [0])[0] is None


@pytest.mark.parametrize("values, why", [
    ([torch.zeros(SLICE_FROM // 2 - 1, 2)], "fewer than"),
    ([torch.zeros(4096, 256), 4096], "holds 4096"),                              # the rows' count passed beside
    ([torch.zeros(4096, 256), torch.arange(4096)[:1000]], "may index"),         # indices into the rows
    ([torch.zeros(4096, 256), [torch.zeros(3)]], "list of tensors"),
])
def test_nothing_is_cut_where_a_size_may_be_read_elsewhere(values, why):
    plan, reason = strategies.slice_plan(values, slots(*(f"a{i}" for i in range(len(values)))), [0])
    assert plan is None and why in reason, reason


def test_a_slice_keeps_the_layout_it_was_given_and_holds_no_view_of_the_whole():
    x = torch.randn(300, 4000).t()  # transposed: (4000, 300), strides (1, 4000)
    plan, _ = strategies.slice_plan([x], slots("x"), [0])
    (cut,) = strategies.sliced([x], plan)
    assert cut.shape[1] == 300 and cut.stride()[0] == 1 and cut.stride()[1] == cut.shape[0]
    assert torch.equal(cut, x[:cut.shape[0]])
    assert cut.untyped_storage().nbytes() == cut.numel() * cut.element_size()


def large(*tensors, rows):
    """The tensors' rows tiled to `rows`, each tile its own values (a percent apart), wanting a gradient as given."""
    generator = torch.Generator().manual_seed(7)
    out = []
    for t in tensors:
        tiled = t.detach().cpu().repeat(-(-rows // t.shape[0]), *([1] * (t.dim() - 1)))[:rows]
        if tiled.is_floating_point():
            tiled = tiled * (1 + 0.01 * torch.randn(tiled.shape, generator=generator, dtype=tiled.dtype))
        out.append(tiled.to(DEVICE).requires_grad_(t.requires_grad))
    return out


def past_the_threshold(args):
    """A planted case's arguments, each tensor's rows tiled so that the largest reaches the slice's threshold."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    rows = -(-SLICE_FROM // (max(t.numel() for t in tensors) // tensors[0].shape[0]))
    tiled = iter(large(*tensors, rows=rows))
    return [next(tiled) if isinstance(a, torch.Tensor) else a for a in args]


def test_a_right_op_at_a_large_size_is_clean_and_checked_on_a_slice():
    x = seeded_randn(1 + SLICE_FROM // 1000, 1000, seed=2)
    report = check_backward(square, x, reference=lambda t: t * t)
    assert report.clean, report
    assert "the rest on a slice of them, (17, 1000)" in report.checked, report.checked


class NeedsAThousandRows(torch.autograd.Function):
    """A kernel that takes its rows in thousands only: it refuses the slice, so the whole is checked."""

    @staticmethod
    def forward(ctx, x):
        if x.shape[0] % 1000:
            raise ValueError("rows must come in thousands")
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


def test_an_op_that_refuses_the_slice_is_checked_whole():
    x = seeded_randn(1000, 600, seed=3)
    report = check_backward(NeedsAThousandRows.apply, x, reference=lambda t: t * t)
    assert report.clean, report
    assert "slice" not in report.checked and "the layouts autograd hands on" in report.passed, report


# A planted bug of each check the slice takes over, and of those it leaves whole, named with its trap on inputs
# tiled past the slice's threshold: the planted zoo's plain-torch cases, and two of its Triton ones whose grid is one
# block (a grid of a block a row, in the CPU's interpreter, takes minutes at this size).
AT_A_LARGE_SIZE = [
    "derivative kept on the class",                        # state between calls (on the slice)
    "a derivative cached by shape",                        # state between calls
    "divides by its uses",                                 # the same call twice (whole)
    "grad_output read with x's layout",                    # the layouts autograd hands on (on the slice)
    "a stride-0 fast path taken for .sum(dim=-1)",         # the layouts
    "needs_input_grad read the wrong way round",           # each input frozen in turn (on the slice)
    "one workspace returned for two gradients",            # state between calls / what backward returns
    "an unused output's None grad_output used",            # an output left unused (on the slice)
    "backward scales its saved gradient in place (Liger-Kernel 0.5.8)",  # backward twice over one graph (slice)
    "mul_ on grad_output",                                 # writes in the backward (whole)
    "a write into the input it returns, undeclared",       # writes in the forward (whole)
    "a row loss scaled by grad_output[0] (Liger-Kernel#584)",  # a random grad_output (whole)
    "sign error",                                          # a random grad_output
    "a grid of one block",                                 # a random grad_output: the backward covers one block
    "a forward grid of one block",                         # the forward covers one block
]


@pytest.mark.parametrize("case", AT_A_LARGE_SIZE)
def test_a_planted_bug_is_named_with_its_trap_past_the_slices_threshold(case):
    op, args, kwargs, reference, trap = PLANTED[case]
    report = check_backward(op, *past_the_threshold(args), reference=reference, **kwargs)
    assert report.traps == [trap], str(report)
    assert "on a slice" in report.checked, report.checked


def test_a_finding_on_the_slice_says_so():
    op, args, kwargs, reference, trap = PLANTED["derivative kept on the class"]
    (x,) = large(*args, rows=-(-SLICE_FROM // args[0].shape[1]))
    report = check_backward(op, x, reference=reference, **kwargs)
    assert any("on a slice of the inputs" in f.evidence for f in report.findings), report


def test_the_checks_left_whole_are_the_first_and_every_other_runs_on_the_slice():
    # The whole-size checks come first in the runner's order, so a report reads in its usual order.
    names = [c.name for c in runner.CHECKS]
    assert names[:len(runner.WHOLE)] == list(runner.WHOLE)


def test_a_cross_entropy_whose_target_indexes_classes_is_cut_with_its_rows():
    logits = torch.randn(8192, 128, device=DEVICE).requires_grad_(True)
    target = torch.randint(0, 128, (8192,), device=DEVICE)
    report = check_backward(cross_entropy_rows, logits, target, reference=cross_entropy_rows)
    assert report.clean, report
    assert "on a slice" in report.checked, report.checked


# Without a reference, the whole is differenced along fewer random directions (truth.WHOLE_DIRECTIONS: it is checked
# whole only for what its size can change), and the slice takes the random grad_output again along every direction.
def test_without_a_reference_the_slice_takes_the_random_grad_output_again_along_every_direction():
    x = seeded_randn(1 + SLICE_FROM // 1000, 1000, seed=3)
    report = check_backward(square, x)
    assert report.clean, report
    assert "the rest, a random grad_output again among them, on a slice of them, (17, 1000)" in report.checked
    assert "along 4 random directions of each input on the whole and 12 on the slice" in report.checked, report.checked
    with_a_reference = check_backward(square, x, reference=lambda t: t * t)
    assert "grad_output again" not in with_a_reference.checked, with_a_reference.checked  # as strong on the whole


WITHOUT_A_REFERENCE = [
    "sign error",                                          # a wrong formula: the whole names it
    "a grid of one block",                                 # the backward covers one block of the whole
    "a row loss scaled by grad_output[0] (Liger-Kernel#584)",  # a uniform grad_output's bug
    "mul_ on grad_output",                                 # writes, whole
    "grad_output read with x's layout",                    # the layouts, on the slice
]


@pytest.mark.parametrize("case", WITHOUT_A_REFERENCE)
def test_without_a_reference_a_planted_bug_is_named_with_its_trap_past_the_slices_threshold(case):
    op, args, kwargs, _, trap = PLANTED[case]
    report = check_backward(op, *past_the_threshold(args), **kwargs)
    assert report.traps == [trap], str(report)
    assert "on a slice" in report.checked, report.checked


class WrongInTheMiddle(torch.autograd.Function):
    """x * x, whose backward is off by half on elements 300,000 to 302,000: past the slice's rows, so only the whole's
    fewer directions can see it (an index that overflows past a size, say)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        grad = 2 * x * grad_output
        flat = grad.reshape(-1).clone()  # in the elements' own order, whatever the layout
        flat[300_000:302_000] *= 1.5
        return flat.reshape(x.shape)


def test_without_a_reference_a_wrong_part_past_the_slice_is_named_as_on_the_whole():
    x = seeded_randn(1 + SLICE_FROM // 1000, 1000, seed=4)
    sliced = check_backward(WrongInTheMiddle.apply, x)
    threshold, strategies.SLICE_FROM = strategies.SLICE_FROM, 1 << 62  # slicing off: every check whole
    try:
        whole = check_backward(WrongInTheMiddle.apply, x)
    finally:
        strategies.SLICE_FROM = threshold
    assert sliced.traps and sliced.traps == whole.traps, (str(sliced), str(whole))
    assert "on a slice" in sliced.checked and "slice" not in whole.checked


def test_the_slice_against_whole_tool_refuses_a_selection_that_checks_nothing(tmp_path):
    """research/slices_against_whole.py: --cases naming no case (a typo of the docstring's own example), a
    --max-forward that skips every case, an --out that cannot be written: exit 2 with one line, never '0 case(s)
    differ', which would read as every case agreeing."""
    import subprocess
    tool = REPO / "research" / "slices_against_whole.py"
    for args, words in ((("--cases", "sign eror"), "is part of no case's name (near: "),
                        (("--max-forward", "-1"), "--max-forward must be above 0"),
                        (("--out", tmp_path), "Is a directory")):
        done = subprocess.run([sys.executable, str(tool), *map(str, args)], capture_output=True, text=True,
                              cwd=REPO, timeout=300)
        assert done.returncode == 2 and words in done.stderr, done.stderr[-2000:]
        assert "Traceback" not in done.stderr and "differ" not in done.stdout
        assert args[0] != "--cases" or "sign error" in done.stderr  # the name meant, offered
