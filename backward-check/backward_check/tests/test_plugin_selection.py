"""Which signatures pytest --backward-check checks (backward-check/backward_check/plugin/selection.py): the ones that
can reveal most, within a time budget, with the copies held within a memory bound.

A small loss library of this file's own, shaped like a fused cross-entropy: its backward is right for
reduction='sum' and 'mean', whose grad_output is one number, and wrong for 'none', where it multiplies every row
by the first row's grad_output. Its tests, like many a library's, call 'sum' and 'mean' first, in two dtypes, and
backpropagate a uniform grad_output, so they pass. With the default options the plugin must name the bug; with a
count limit of 3 signatures it must still (a value not yet checked goes before a dtype); and the table says what
it left out, and why. The ranking itself, a budget that allows a few checks, and the memory bound are tested on
the selection directly, with no process and no clock.
"""
import re
import subprocess
import sys

import pytest
from backward_check.tests.plugin_runs import row, run_pytest, write_suite

from backward_check.plugin.selection import BUDGET_FLOOR_SECONDS

LOSSES = '''
import torch


class CrossEntropy(torch.autograd.Function):
    """Cross-entropy over the rows of logits, summed, averaged or per row."""

    @staticmethod
    def forward(ctx, logits, target, reduction, label_smoothing):
        logp = torch.log_softmax(logits.float(), dim=-1)
        smooth = -logp.mean(dim=-1)
        picked = -logp.gather(1, target[:, None]).squeeze(1)
        loss = (1 - label_smoothing) * picked + label_smoothing * smooth
        ctx.save_for_backward(logits, target)
        ctx.reduction, ctx.label_smoothing = reduction, label_smoothing
        if reduction == "sum":
            return loss.sum().to(logits.dtype)
        if reduction == "mean":
            return loss.mean().to(logits.dtype)
        return loss.to(logits.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        logits, target = ctx.saved_tensors
        p = torch.softmax(logits.float(), dim=-1)
        onehot = torch.nn.functional.one_hot(target, logits.shape[-1]).float()
        smoothing = ctx.label_smoothing
        grad = p - (1 - smoothing) * onehot - smoothing / logits.shape[-1]
        if ctx.reduction == "mean":
            grad = grad / logits.shape[0]
        if ctx.reduction == "none":
            grad = grad * grad_output.reshape(-1)[0].float()  # the bug: one row's grad_output for every row
        else:
            grad = grad * grad_output.float()
        return grad.to(logits.dtype), None, None, None
'''

LOSS_TESTS = '''
import pytest
import torch

from losses import CrossEntropy


@pytest.mark.parametrize("shape", [(3, 20)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("reduction", ["sum", "mean", "none"])
def test_correctness(shape, dtype, reduction):
    torch.manual_seed(0)
    logits = torch.randn(*shape, dtype=dtype, requires_grad=True)
    target = torch.randint(0, shape[1], (shape[0],))
    expected_logits = logits.detach().float().requires_grad_()
    expected = torch.nn.functional.cross_entropy(expected_logits, target, reduction=reduction)
    loss = CrossEntropy.apply(logits, target, reduction, 0.0)
    torch.testing.assert_close(loss.float(), expected, atol=1e-2, rtol=1e-2)
    loss.backward(torch.ones_like(loss))      # a uniform grad_output: 'none' passes here
    expected.backward(torch.ones_like(expected))
    torch.testing.assert_close(logits.grad.float(), expected_logits.grad, atol=1e-2, rtol=1e-2)
'''


def run_suite(folder, *options):
    """The loss library's tests under the plugin: (exit status, output)."""
    (folder / "losses.py").write_text(LOSSES)
    (folder / "test_losses.py").write_text(LOSS_TESTS)
    return run_pytest(folder, "--backward-check", *options, "test_losses.py")


def test_the_order_of_the_calls_hides_the_bug_from_the_suite_itself(tmp_path):
    """The premise: the library's own tests pass, and call 'none' last."""
    (tmp_path / "losses.py").write_text(LOSSES)
    (tmp_path / "test_losses.py").write_text(LOSS_TESTS)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--collect-only",
                           "test_losses.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    ids = [line.split("[")[1] for line in done.stdout.splitlines() if "::" in line]
    assert [i.split("-")[:2] for i in ids] == [["sum", "dtype0"], ["sum", "dtype1"], ["mean", "dtype0"],
                                                   ["mean", "dtype1"], ["none", "dtype0"], ["none", "dtype1"]], ids
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_losses.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "6 passed" in done.stdout, done.stdout


def test_the_default_options_name_the_bug_in_none(tmp_path):
    code, output = run_suite(tmp_path)
    assert code == 0, output
    rows = row(output, "losses.CrossEntropy", whole=True)
    checked = [r for r in rows if r.startswith("  ") and not r.startswith(("   ", "  ("))]
    none = [r for r in rows if "'none'" in r]
    if not none:
        skip_where_the_machine_is_too_slow_for_the_floor(checked, rows)
    assert none and all("TRAP assumes a uniform grad_output" in r for r in none), rows
    assert not [r for r in rows if ("'sum'" in r or "'mean'" in r) and "TRAP" in r], rows
    # every signature is checked, or counted left out (on a slow machine the budget's floor may not hold six)
    left_out = re.search(r"^  \((\d+) more signatures? not checked: ", "\n".join(rows), re.M)
    assert len(checked) + (int(left_out[1]) if left_out else 0) == 6, rows


def skip_where_the_machine_is_too_slow_for_the_floor(checked, rows):
    """The time budget's floor (a minute) holds this suite's three reductions where a check of its 3 x 20 loss takes
    a second or two. On a machine so loaded that the checks which ran took half the floor, 'none' is rightly left
    out past the budget (an H200 running the repository's other GPU parts beside 10 test workers took 22 s a
    check): that is the budget working, so the test is skipped there, with the seconds, not failed. The order it
    checks in is tested without a clock below."""
    seconds = [float(found[-1]) for r in checked if (found := re.findall(r"\s(\d+\.\d)\s{2}\S", r))]
    past_the_budget = "past the time budget" in "\n".join(rows)
    if past_the_budget and sum(seconds) >= BUDGET_FLOOR_SECONDS / 2:
        pytest.skip(f"this machine took {', '.join(f'{s:.1f}' for s in seconds)} s for the checks that ran, "
                    f"against a floor of {BUDGET_FLOOR_SECONDS:.0f} s: 'none' was left out past the time budget")


def test_a_value_not_yet_checked_goes_before_a_dtype(tmp_path):
    """With room for three signatures, the three reductions are checked (the first in bfloat16), not float32's
    'sum' and 'mean' that came before 'none'; the table says what the limit left out, and the one option that
    checks everything."""
    code, output = run_suite(tmp_path, "--backward-check-limit", "3")
    assert code == 0, output
    rows = row(output, "losses.CrossEntropy", whole=True)
    checked = [r for r in rows if "bfloat16" in r or "float32" in r]
    assert [("'sum'" in r, "'mean'" in r, "'none'" in r) for r in checked] == \
        [(True, False, False), (False, True, False), (False, False, True)], rows
    assert all("bfloat16" in r for r in checked), rows
    assert "TRAP assumes a uniform grad_output" in checked[2], rows
    assert "  (3 more signatures not checked: 3 past --backward-check-limit 3: 3 with a new dtype)" in rows, rows


# -- the ranking, on the selection alone -------------------------------------------------------------

def loss_call(name, dtype, reduction, test, rank=2, smoothing=0.0):
    """A RecordedCall of the loss, as the recorder makes it (signature and all), without a process."""
    import torch
    from backward_check.plugin.recording import RecordedCall, signature_of
    logits = torch.zeros((3,) * rank, dtype=dtype, requires_grad=True)
    target = torch.zeros(3, dtype=torch.long)
    signature, described = signature_of((logits, target, reduction, smoothing), {}, {})
    return RecordedCall(None, name, signature, described, (), test, nbytes=1000)


class Checks:
    """A budget that allows `allowed` checks, and the selection over it."""

    def __init__(self, allowed, memory_bytes=10 ** 9, limit=None):
        from backward_check.plugin.selection import Budget, Selection
        self.spent = 0.0
        self.budget = Budget(factor=1.0, floor=allowed, clock=lambda: 0.0,  # the suite's time held still
                             plugin_seconds=lambda: self.spent)
        self.selection = Selection(self.budget, memory_bytes, limit)
        self.picked = []

    def offer(self, call):
        self.selection.offer(call, lambda: ((), {}))

    def run(self, test=None):
        while (call := self.selection.next_call(test)) is not None:
            self.selection.checked_here(call, 1.0)
            self.spent += 1.0
            self.picked.append(call.described)


LIGER_ORDER = [("bfloat16", "sum"), ("float32", "sum"), ("bfloat16", "mean"), ("float32", "mean"),
               ("bfloat16", "none"), ("float32", "none")]


@pytest.mark.parametrize("allowed", [3, 4, 5])
def test_a_budget_of_a_few_checks_takes_every_value_first(allowed):
    import torch
    checks = Checks(allowed)
    for i, (dtype, reduction) in enumerate(LIGER_ORDER):
        test = f"test_correctness[{i}]"
        checks.offer(loss_call("loss", getattr(torch, dtype), reduction, test))
        checks.run(test)
    checks.run()
    checks.selection.give_up()
    assert checks.picked[:3] == ["bfloat16 2-d, int64 1-d, 'sum', 0.0", "bfloat16 2-d, int64 1-d, 'mean', 0.0",
                                 "bfloat16 2-d, int64 1-d, 'none', 0.0"]
    assert checks.picked[3:] == ["float32 2-d, int64 1-d, 'sum', 0.0", "float32 2-d, int64 1-d, 'mean', 0.0"][
        :allowed - 3]
    assert len(checks.selection.left_out["loss"]) == 6 - allowed


def mode_call(op, value, test):
    """A call of op on a 3 x 4 tensor and one mode argument, as the recorder makes it."""
    import torch
    from backward_check.plugin.recording import RecordedCall, signature_of
    signature, described = signature_of((torch.zeros(3, 4, requires_grad=True), value), {}, {})
    return RecordedCall(None, op, signature, f"{op} {value}", (), test, nbytes=100)


def test_an_early_files_new_values_leave_a_reserve_for_an_op_first_called_late():
    """Ten tests of one op, each with a new value, then an op first called in the last test: with a budget of ten
    checks, the late op's first call is checked (before, the early values spent the budget)."""
    checks = Checks(10)
    for i in range(10):
        checks.offer(mode_call("early", f"mode{i}", f"test_early[{i}]"))
        checks.run(f"test_early[{i}]")
    checks.offer(mode_call("late", "only", "test_late"))
    checks.run("test_late")
    checks.run()
    assert "late only" in checks.picked, checks.picked
    assert len(checks.picked) == 10


def test_at_the_end_each_ops_next_signature_goes_across_ops():
    """At the session's end: first calls first, then each op's next call, the op checked least first, so op b's
    second signature goes before op a's third."""
    checks = Checks(5)
    for op in ("a", "b"):
        for value in ("x", "y", "z"):
            checks.offer(mode_call(op, value, "test_only_at_the_end"))
    checks.run()
    assert checks.picked[:4] == ["a x", "b x", "a y", "b y"], checks.picked


def test_the_budget_is_the_suites_wall_clock_less_the_plugins():
    """The suite's own time is its wall clock since the plugin started (collection, imports and compiling count:
    a GPU suite spends most of its time there), less the plugin's own seconds; the budget is factor times that, and
    at least the floor."""
    from backward_check.plugin.selection import Budget
    now, spent = [100.0], [0.0]
    budget = Budget(factor=1.0, floor=20.0, clock=lambda: now[0], plugin_seconds=lambda: spent[0])
    now[0], spent[0] = 150.0, 10.0
    assert budget.suite_seconds == 40.0 and budget.seconds == 40.0
    assert budget.allows(30.0) and not budget.allows(31.0)
    spent[0] = 45.0  # the plugin's time is not the suite's: past it, nothing more
    assert budget.suite_seconds == 5.0 and budget.seconds == 20.0 and not budget.allows()
    assert Budget(factor=0.5, floor=1.0, clock=lambda: now[0], started=0.0).seconds == 75.0
    assert Budget(factor=None, clock=lambda: now[0]).seconds == float("inf")


def test_a_check_is_expected_to_take_what_the_ops_checks_after_its_first_took():
    """The first check of an op compiles what the checker's calls need (seconds), the later ones find it compiled:
    after a first check of 7 s and a second of 2 s, with 14 s of budget left, of which a value checked after its test
    leaves 10 s (half the budget) to ops called later, a third fits in the other 4 (2 s expected, not 4.5)."""
    import torch
    from backward_check.plugin.selection import Budget, Selection
    spent = [0.0]
    budget = Budget(factor=1.0, floor=20.0, clock=lambda: 0.0, plugin_seconds=lambda: spent[0])
    selection = Selection(budget, 10 ** 9)
    assert selection.expected_seconds("loss") == 0.0
    for i, (reduction, seconds) in enumerate([("sum", 7.0), ("mean", 2.0)]):
        call = loss_call("loss", torch.float32, reduction, f"t{i}")
        selection.offer(call, lambda: ((), {}))
        assert selection.next_call(f"t{i}") is call
        selection.checked_here(call, seconds)
        assert selection.expected_seconds("loss") == (7.0 if i == 0 else 2.0)
    spent[0] = 6.0  # a value after its test leaves half the budget to ops called later: 6 + 2 <= 10
    none = loss_call("loss", torch.float32, "none", "t2")
    selection.offer(none, lambda: ((), {}))
    assert selection.next_call("t2") is none


def check_while(selection, spent, picked, seconds_of, test=None):
    while (chosen := selection.next_call(test)) is not None:
        picked.append(chosen.described)
        selection.checked_here(chosen, seconds_of(chosen))
        spent[0] += seconds_of(chosen)


@pytest.mark.parametrize("first_check", [25.0, 29.5])
def test_a_small_call_late_in_the_file_is_checked_in_what_a_large_ones_check_left(first_check):
    """Liger-Kernel's fused loss file, in small: 'mean' and 'sum' on large inputs (25 s a check), then its only
    'none' call, on 8 rows (the call that shows its bug), late in the file. Expected to take what the large checks
    took, the 'none' call waited for the session's end, behind the 'sum' call, which left too little of the 60 s
    budget: it was never checked. Now, at the session's end, a call smaller than the op's checks so far is expected
    to take its share of their time by size (at least SMALLEST_SHARE of it), and among calls that bring as much the
    cheapest goes first: the 'none' call is checked first there, before the large 'sum' call, whatever the first
    check took. After its test a call still fits only by what the op's checks took (torchdiffeq's suite: an ODE
    solver's second call, smaller in bytes, took 45 s, and spent what the ops called later needed). A call larger
    than every check after the first is expected to take what the largest of them took (not the first, which
    compiles)."""
    import torch
    from backward_check.plugin.selection import SMALLEST_SHARE, Budget, Selection
    spent = [0.0]
    budget = Budget(factor=1.0, floor=60.0, clock=lambda: 0.0, plugin_seconds=lambda: spent[0])
    selection = Selection(budget, 10 ** 9)
    large = 10 ** 7
    mean, total, wider, none = calls = [
        loss_call("loss", torch.bfloat16, "mean", "t0"), loss_call("loss", torch.bfloat16, "sum", "t1"),
        loss_call("loss", torch.float32, "mean", "t2"), loss_call("loss", torch.bfloat16, "none", "t3")]
    for call, nbytes in zip(calls, (large, large, 2 * large, 4096)):
        call.nbytes = nbytes
    picked = []

    def seconds_of(call):
        return (first_check if not picked[:-1] else 25.0) if call.nbytes >= large else 1.0

    for call in calls:
        selection.offer(call, lambda: ((), {}))
        check_while(selection, spent, picked, seconds_of, call.test)
    assert picked == [mean.described], picked   # after their tests, 'sum' and 'none' are each expected to take 25 s
    check_while(selection, spent, picked, seconds_of)
    assert picked[:3] == [mean.described, none.described, total.described], picked
    assert selection.waiting == [wider]        # 26 + 25 + 25 > 60, 30.5 + 25 + 25 > 60
    assert selection.expected_seconds("loss", 2 * large) == 25.0   # the largest check after the first
    assert selection.expected_seconds("loss", large) == 25.0
    assert selection.expected_seconds("loss", large // 2) == 25.0 / 2     # its share of the nearest as large
    assert selection.expected_seconds("loss", 4096) == 1.0
    assert selection.expected_seconds("loss", 1) == 1.0 * SMALLEST_SHARE


def test_a_slow_collection_counts_as_the_suites_time(tmp_path):
    """A test file whose import takes two seconds (a library compiling its kernels, say): the table counts them as
    the suite's own."""
    (tmp_path / "test_slow_import.py").write_text(
        "import time\nimport torch\ntime.sleep(2.0)\n\n\n"
        "class Triple(torch.autograd.Function):\n"
        "    @staticmethod\n    def forward(ctx, x):\n        return x * 3\n\n"
        "    @staticmethod\n    def backward(ctx, grad_output):\n        return grad_output * 3\n\n\n"
        "def test_triple():\n    Triple.apply(torch.randn(4, requires_grad=True)).sum().backward()\n")
    code, output = run_pytest(tmp_path, "--backward-check", "test_slow_import.py")
    assert code == 0, output
    suite = re.search(r"the plugin took [\d.]+ s beside the suite's own ([\d.]+) s \(a budget of (\d+) s\)", output)
    assert suite and 2.0 <= float(suite[1]) < 60.0 and suite[2] == "60", output


def test_the_tiers_value_dtype_shape_then_combinations():
    import torch
    from backward_check.plugin.selection import COMBINATION, DTYPE, FIRST, SHAPE, VALUE, features, tier
    first = loss_call("loss", torch.float32, "sum", "t")
    covered = set(features(first.signature))
    assert tier(features(first.signature), None) == FIRST
    assert tier(features(loss_call("loss", torch.float32, "none", "t").signature), covered) == VALUE
    assert tier(features(loss_call("loss", torch.float32, "sum", "t", smoothing=0.1).signature), covered) == VALUE
    assert tier(features(loss_call("loss", torch.float64, "sum", "t").signature), covered) == DTYPE
    assert tier(features(loss_call("loss", torch.float32, "sum", "t", rank=3).signature), covered) == SHAPE
    covered |= features(loss_call("loss", torch.float64, "none", "t").signature)
    assert tier(features(loss_call("loss", torch.float64, "sum", "t").signature), covered) == COMBINATION


def test_none_against_a_tensor_is_a_new_value():
    import torch
    from backward_check.plugin.recording import signature_of
    from backward_check.plugin.selection import VALUE, features, tier
    x = torch.zeros(3, requires_grad=True)
    with_bias, _ = signature_of((x, torch.zeros(3)), {}, {})
    without, _ = signature_of((x, None), {}, {})
    assert tier(features(without), set(features(with_bias))) == VALUE
    assert tier(features(with_bias), set(features(without))) == VALUE


def test_a_number_that_changes_in_every_test_makes_a_handful_of_signatures():
    """The first few values of a number are told apart, then only its sign: 0, 1.5, 2.5, 3.5 and 4.5 make five
    keys, and a hundred more positive floats none."""
    import torch
    from backward_check.plugin.recording import NUMBER_VALUES_TOLD_APART, signature_of
    x = torch.zeros(3, requires_grad=True)
    told_apart = {}
    signatures = {signature_of((x, v), {}, told_apart)[0] for v in [0.0, 1.5, 2.5, 3.5, 4.5, -1.0, -2.0]}
    signatures |= {signature_of((x, 5.0 + i / 7), {}, told_apart)[0] for i in range(100)}
    assert NUMBER_VALUES_TOLD_APART == 3
    assert len(signatures) == 1 + 3 + 2  # 0.0; 1.5, 2.5, 3.5; then > 0 and < 0
    ints = {signature_of((x,), {"block": b}, told_apart)[0] for b in (64, 128, 256, 64, 512, 1024)}
    assert len(ints) == 4


def test_the_memory_bound_drops_the_least_revealing_copies_first():
    """Room for two calls' copies, held by two combinations of what was checked: a call that brings a new value
    pushes out the later one, and a third combination is not copied at all."""
    import torch
    from backward_check.plugin.selection import COMBINATION, MEMORY, VALUE
    checks = Checks(allowed=10, memory_bytes=2000)
    for i, (dtype, reduction, smoothing) in enumerate([(torch.float32, "sum", 0.0), (torch.float64, "none", 0.1)]):
        checks.offer(loss_call("loss", dtype, reduction, f"t{i}", smoothing=smoothing))
        checks.run()
    earlier = loss_call("loss", torch.float64, "sum", "t2", smoothing=0.0)
    later = loss_call("loss", torch.float32, "none", "t3", smoothing=0.0)
    for call in (earlier, later):
        checks.offer(call)
        assert checks.selection.tier(call) == COMBINATION
    assert checks.selection.held_bytes == 2000
    value = loss_call("loss", torch.float32, "mean", "t4")
    checks.offer(value)
    assert checks.selection.waiting == [earlier, value] and later.args is None
    assert checks.selection.left_out["loss"] == {later.key: (MEMORY, COMBINATION)}
    last = loss_call("loss", torch.float32, "sum", "t5", smoothing=0.1)
    checks.offer(last)
    assert checks.selection.waiting == [earlier, value] and last.args is None
    assert checks.selection.left_out["loss"] == {later.key: (MEMORY, COMBINATION), last.key: (MEMORY, COMBINATION)}
    assert checks.selection.tier(value) == VALUE and checks.selection.held_bytes == 2000


INTERRUPTED_SUITE = '''
import torch

from suite_ops import Doubles, NeverChecked


def grad_of(op, x):
    return torch.autograd.grad(op.apply(x), x, torch.randn_like(x))


def test_first_call():
    grad_of(Doubles, torch.randn(4, requires_grad=True))


def test_a_new_dtype():     # waits for the session's end, which never comes
    grad_of(Doubles, torch.randn(4, dtype=torch.float64, requires_grad=True))


def test_interrupted():     # a first call, then ^C (or a deadline's signal) inside the test
    grad_of(NeverChecked, torch.randn(4, requires_grad=True))
    raise KeyboardInterrupt
'''


def interrupted_run(folder, suite, name, op):
    """The plugin's run of a suite that a KeyboardInterrupt stops: its output, once the op's float32 call is clean
    in its row and its float64 call is counted as one the interrupt left unchecked."""
    write_suite(folder, suite, name)
    code, output = run_pytest(folder, "--backward-check", name)
    assert code == 2 and "KeyboardInterrupt" in output, output[-3000:]
    rows = row(output, op, whole=True)
    assert any(r.lstrip().startswith("float32 1-d") and "clean" in r for r in rows), rows
    assert ("  (1 more signature not checked: 1 waiting for their check, or in it, when the run was interrupted: "
            "1 with a new dtype)") in rows, rows
    return output


def test_an_interrupted_run_says_so_for_the_calls_still_waiting(tmp_path):
    """A run interrupted before the session's end: the calls still waiting were not past the time budget, and
    --backward-check-budget=all would not have checked them. The table says they were waiting when the run was
    interrupted, in the op's row and in the summary's line of ops never checked."""
    output = interrupted_run(tmp_path, INTERRUPTED_SUITE, "test_interrupted.py", "suite_ops.Doubles")
    assert "1 op never checked: suite_ops.NeverChecked; the run was interrupted before their check" in output, \
        output[-3000:]
    assert "past the time budget" not in output and "--backward-check-budget=all" not in output, output[-3000:]


SLOW_OPS = '''
import time

import torch


class SlowDoubles(torch.autograd.Function):
    """Right, and slow: a check of it (dozens of forwards) takes seconds."""

    @staticmethod
    def forward(ctx, x):
        time.sleep(0.02)
        return x * 2

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * 2
'''

DEADLINE_AT_THE_END_SUITE = '''
import signal

import pytest
import torch

from slow_ops import SlowDoubles


def interrupt(signum, frame):
    raise KeyboardInterrupt


@pytest.fixture(scope="module", autouse=True)
def deadline_after_the_last_test():
    yield
    signal.signal(signal.SIGALRM, interrupt)   # a deadline's signal, two seconds into the session's end checks
    signal.setitimer(signal.ITIMER_REAL, 2.0)


def grad_of(op, x):
    return torch.autograd.grad(op.apply(x), x, torch.randn_like(x))


def test_first_call():      # checked after the test
    grad_of(SlowDoubles, torch.randn(4, requires_grad=True))


def test_a_new_dtype():     # waits for the session's end, where the deadline interrupts its check
    grad_of(SlowDoubles, torch.randn(4, dtype=torch.float64, requires_grad=True))
'''


def test_a_run_interrupted_during_the_session_end_checks_counts_them(tmp_path):
    """fla-core's runs under a deadline: the signal came while the session's end checked the calls that waited. The
    summary said "the plugin took 0.0 s beside the suite's own 0.0 s", and the call in its check was in no row. Now
    the plugin's and the suite's seconds are counted, and the call is one the interrupt left unchecked."""
    (tmp_path / "slow_ops.py").write_text(SLOW_OPS)
    output = interrupted_run(tmp_path, DEADLINE_AT_THE_END_SUITE, "test_deadline.py", "slow_ops.SlowDoubles")
    first = re.search(r"test_deadline.py::test_first_call +([\d.]+) +clean", output)
    waited = re.search(r"worker process started 1 time \(([\d.]+) s waited for\)", output)
    took = re.search(r"the plugin took ([\d.]+) s beside the suite's own ([\d.]+) s", output)
    assert first and waited and took and float(took[2]) > 0.0, output[-3000:]
    # the worker's start, the first check, and the second's two seconds before the signal
    assert float(took[1]) >= float(waited[1]) + float(first[1]) + 1.5, output[-3000:]


def test_an_output_of_a_new_rank_goes_before_a_new_value():
    """Liger-Kernel's fused loss file, in small: its first 300-odd tests call 'mean' and 'sum' (a scalar loss, whose
    grad_output is one number), and 'none' (a loss per row) only near the end. With room for two checks, the second
    is a 'none' call: a grad_output with one value per row is the first that can show a uniform, strided or broadcast
    grad_output's trap. Before the rank of what a call returned counted, 'mean' went first, by its order."""
    import torch
    from backward_check.plugin.recording import Recorder
    from backward_check.plugin.selection import OUTPUT, VALUE
    checks = Checks(2)
    recorder = Recorder(offer=checks.offer)
    for i, (dtype, reduction) in enumerate(LIGER_ORDER):
        test = f"test_correctness[{i}]"
        call = loss_call("loss", getattr(torch, dtype), reduction, test)
        checks.offer(call)
        recorder.learn_outputs(call, (torch.zeros(3) if reduction == "none" else torch.zeros(()), None))
        checks.run(test)
    none = next(c for c in checks.selection.waiting if "'none'" in c.described)
    assert checks.selection.tier(none) == OUTPUT and checks.selection.tier(checks.selection.waiting[1]) == VALUE
    checks.run()
    assert checks.picked == ["bfloat16 2-d, int64 1-d, 'sum', 0.0", "bfloat16 2-d, int64 1-d, 'none', 0.0"], \
        checks.picked
    assert not recorder.problems


ONE_TEST_TWO_REDUCTIONS = '''
import torch

from losses import CrossEntropy


def test_sum():
    logits = torch.randn(3, 20, requires_grad=True)
    CrossEntropy.apply(logits, torch.randint(0, 20, (3,)), "sum", 0.0).backward()


def test_mean_then_none():
    logits = torch.randn(3, 20, requires_grad=True)
    target = torch.randint(0, 20, (3,))
    CrossEntropy.apply(logits, target, "mean", 0.0).backward()
    CrossEntropy.apply(logits, target, "none", 0.0).sum().backward()
'''


def test_the_outputs_a_test_call_returns_are_learned_by_the_recorder(tmp_path):
    """Through pytest, at a limit of two signatures: a test that calls 'mean', then 'none'. The recorder learns each
    call's outputs as the test's own call returns, so after that test 'none' (the first loss per row) is checked
    before 'mean', which came first, and names the bug; 'mean' is counted left out."""
    (tmp_path / "losses.py").write_text(LOSSES)
    (tmp_path / "test_two.py").write_text(ONE_TEST_TWO_REDUCTIONS)
    code, output = run_pytest(tmp_path, "--backward-check", "--backward-check-limit", "2", "test_two.py")
    assert code == 0, output
    rows = row(output, "losses.CrossEntropy", whole=True)
    checked = [r for r in rows if r.startswith("  float32")]
    assert [("'sum'" in r, "'none'" in r) for r in checked] == [(True, False), (False, True)], rows
    assert "TRAP assumes a uniform grad_output" in checked[1], rows
    assert "  (1 more signature not checked: 1 past --backward-check-limit 2: 1 with a new value)" in rows, rows
