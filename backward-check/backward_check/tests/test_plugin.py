"""pytest --backward-check (backward-check/pytest_backward_check.py): the checker inside a library's own test suite,
with no new test code. Each test runs a small generated suite (a test file, and beside it the module of ops it
calls, which the plugin's worker process imports) with the plugin on or off, and reads the table it prints.

The main suite runs once, in a subprocess, for the tests that read its table (report mode: a correct op clean, a
planted bug named, a custom op by its op name, every signature of an op checked, an op defined inside a test
checked in a process forked for it, calls under no_grad not recorded, a long signature kept in its column, and an
op whose backward kills its process reported as the op's fault, with the call, before the next op is checked by a
fresh worker). The others run in this process through pytester: off unless asked, =fail (a trap found at the
session's end fails the run), the accepted file with its reasons, and the usage errors. Which signatures are
checked, and when, is test_plugin_selection.py's; arguments of every type, _arguments.py's; pytest-xdist,
_xdist.py's; seeds and unstable verdicts, _seeds.py's.
"""
import inspect
import json
import re
import sys

import pytest
import torch
from backward_check.tests.plugin_runs import PACKAGE, row, run_pytest, suite_holds_cuda, write_suite

# Function.apply as torch has it, before any test patches it (a classmethod until 2.14, a C descriptor after).
TORCH_APPLY = inspect.getattr_static(torch.autograd.Function, "apply")

sys.path.insert(0, str(PACKAGE))  # for pytester's runs in this process: -p pytest_backward_check

pytest_plugins = ["pytester"]

# The main suite, run in report mode: every test passes with the plugin on, whatever it finds.
SUITE = '''
import gc
import json
import random
import weakref
from pathlib import Path

import numpy
import torch

from suite_ops import DiesOnStrideZero, Doubles, Good, IgnoresGradOutput, ManyArguments, NeverChecked, scale

INPUTS = []


def test_good():
    Good.apply(torch.randn(4, 5, requires_grad=True), torch.randn(4, 5)).sum().backward()


def test_ignores_grad_output():
    x = torch.randn(6, 7, requires_grad=True)
    IgnoresGradOutput.apply(x).sum().backward()
    INPUTS.append(weakref.ref(x))


def test_the_plugin_kept_no_test_tensor():
    gc.collect()
    assert INPUTS[0]() is None


def test_dies_on_stride_zero():
    DiesOnStrideZero.apply(torch.randn(4, 5, requires_grad=True)).mean()  # its backward never runs here


def test_custom_op_after_the_fault():
    scale(torch.randn(3, 4, requires_grad=True), 2.0).sum().backward()


def test_four_signatures():
    for x in (torch.randn(5), torch.randn(3, 4), torch.randn(4, 3).t(), torch.randn(5, dtype=torch.float64)):
        Doubles.apply(x.requires_grad_())


def test_calls_not_recorded():
    with torch.no_grad():
        NeverChecked.apply(torch.randn(4, requires_grad=True))
    NeverChecked.apply(torch.randn(4))  # no input requires grad


def test_local_op():
    class LocalDoubles(torch.autograd.Function):  # a worker process cannot import it
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad_output):
            torch.rand(1), random.random(), numpy.random.rand()  # draws, as a stochastic rounding would
            return grad_output * 2

    torch.manual_seed(0)
    random.seed(0)
    numpy.random.seed(0)
    LocalDoubles.apply(torch.randn(5, requires_grad=True)).sum().backward()


def test_many_arguments():
    x = torch.randn(4, 5, requires_grad=True)
    ManyArguments.apply(x, torch.randn(4, 5), torch.randn(4, 5, requires_grad=True), "reflect-and-rescale", 1e-6,
                        0.125, True, 256).sum().backward()


def test_draws_after_the_checks():
    draws = {"torch": torch.randn(4).tolist(), "python": random.random(), "numpy": float(numpy.random.rand())}
    Path("draws.json").write_text(json.dumps(draws))
'''


def run_in_process(pytester, *args):
    return pytester.runpytest("-p", "pytest_backward_check", "-p", "no:cacheprovider", *args)


@pytest.fixture(scope="module")
def report_run(tmp_path_factory):
    """The main suite with the plugin on, in report mode, in a subprocess: (its output, its folder). The mode is
    left to its default, and the test file follows the option (`--backward-check test_suite.py`); no time budget,
    so that a slow machine checks every signature too."""
    folder = tmp_path_factory.mktemp("suite")
    write_suite(folder, SUITE)
    code, output = run_pytest(folder, "--backward-check-budget=all", "--backward-check", "test_suite.py",
                              timeout=600)
    return output, folder, code


def test_report_mode_leaves_the_suite_passing(report_run):
    output, _, returncode = report_run
    assert returncode == 0, output
    assert "10 passed" in output, output
    assert "Traceback" not in output, output


def test_a_correct_op_is_clean_and_a_planted_bug_named(report_run):
    output, _, _ = report_run
    good, = row(output, "suite_ops.Good")
    assert good.rstrip().endswith("clean") and "float32 2-d, float32 2-d (no grad)" in good, good
    assert "test_suite.py::test_good" in good, good
    bug, = row(output, "suite_ops.IgnoresGradOutput")
    assert bug.rstrip().endswith("TRAP ignores grad_output"), bug
    assert "TRAP  ignores grad_output: " in output  # its report, under the table, its fix for a library's author:
    assert "fix: multiply the local derivative by grad_output\n" in output and "(the book:" not in output


def test_a_custom_op_goes_by_its_op_name(report_run):
    output, _, _ = report_run
    custom, = row(output, "backward_check_plugin_test::scale")
    assert custom.rstrip().endswith("clean") and "float32 2-d, 2.0  " in custom, custom
    assert "CustomOpDef" not in output


def test_a_fault_is_the_ops_with_the_call_and_a_fresh_worker_goes_on(report_run):
    output, _, _ = report_run
    fault, = row(output, "suite_ops.DiesOnStrideZero")
    assert "FAULT the op's process was killed by SIGSEGV in the call: with a grad_output after .sum() (all " \
           "strides 0)" in fault and fault.rstrip().endswith("in its backward"), fault
    assert 'suite_ops.py", line' in output  # the frame of the op's backward the fault happened in
    assert "again after each of 1 fault" in output, output
    # the next op, checked by a fresh worker, is checked right (the custom op's row above is clean)
    assert row(output, "backward_check_plugin_test::scale", "test_custom_op_after_the_fault", whole=True)


def test_every_signature_of_an_op_is_checked_the_first_after_its_test(report_run):
    """Each of the four signatures: after its test, the op's first call and then its 2-d call, whose output is of a
    rank not yet checked (a 2-d grad_output can come transposed, or with strides (1, 0) after .sum(dim=-1)); at the
    session's end the dtype, before the layout; and nothing left out."""
    output, _, _ = report_run
    rows = row(output, "suite_ops.Doubles")
    assert [r.split("  test_suite.py")[0].strip() for r in rows] == \
        ["float32 1-d", "float32 2-d", "float64 1-d", "float32 2-d non-contiguous"], rows
    assert all(r.rstrip().endswith("clean") for r in rows), rows


def test_a_long_signature_stays_in_its_column(report_run):
    """The arguments go on in their column on the next line, so the test, the seconds and the verdict stand where
    every other row has them."""
    from backward_check.plugin.findings import ARGUMENTS_WIDTH
    output, _, _ = report_run
    rows = row(output, "suite_ops.ManyArguments", whole=True)
    first, more = rows[0], rows[1]
    assert first[2 + ARGUMENTS_WIDTH:].startswith("test_suite.py::test_many_arguments"), rows
    assert first.rstrip().endswith("clean"), rows
    assert more.startswith("    ") and more.strip() in ("'reflect-and-rescale', 1e-06, 0.125, True, 256",
                                                        "1e-06, 0.125, True, 256", "0.125, True, 256"), rows
    assert (first[2:2 + ARGUMENTS_WIDTH].strip() + " " + more.strip()).startswith(
        "float32 2-d, float32 2-d (no grad), float32 2-d, 'reflect-and-rescale'"), rows


def test_calls_under_no_grad_or_without_an_input_wanting_one_are_not_recorded(report_run):
    output, _, _ = report_run
    assert "NeverChecked" not in output


def test_an_op_defined_inside_a_test_is_checked_in_a_process_forked_for_it(report_run):
    """Where the suite's process holds a CUDA context (on a GPU), no forked process can check it: it is not
    checked, and the row says why."""
    output, _, _ = report_run
    local = row(output, "test_suite.test_local_op.<locals>.LocalDoubles", whole=True)
    why = "it is defined inside a function (test_local_op.<locals>.LocalDoubles), so a worker process cannot import it"
    if suite_holds_cuda():
        assert f"not checked: {why}, and a process forked from the suite's cannot use its CUDA context" in local[0]
    else:
        assert local[0].rstrip().endswith("clean"), local
        assert local[1] == f"    (checked in a process forked from the suite's: {why})", local


def test_off_unless_asked_and_the_random_generators_untouched(report_run, pytester):
    """The same suite with the plugin loaded but not asked for: nothing patched, no table; and every test's
    random draws after the checks are the ones the suite draws without them."""
    _, folder, _ = report_run
    write_suite(pytester.path, SUITE + '''

def test_nothing_patched():
    import inspect
    apply = inspect.getattr_static(torch.autograd.Function, "apply")  # a C descriptor from torch 2.14, no __func__
    assert not (getattr(getattr(apply, "__func__", apply), "__module__", None) or "").startswith("backward_check")
''')
    result = run_in_process(pytester)
    result.assert_outcomes(passed=11)
    # no table (its header line); pytest's own header names the plugin where the package is installed
    assert not re.search(r"^=+ backward-check =+$", result.stdout.str(), flags=re.M), result.stdout.str()
    assert json.loads((pytester.path / "draws.json").read_text()) == json.loads((folder / "draws.json").read_text())


FAIL_SUITE = '''
import torch

from suite_ops import IgnoresGradOutput, ScalesGradInPlace


def test_ignores_grad_output():
    IgnoresGradOutput.apply(torch.randn(6, 7, requires_grad=True)).sum().backward()


def test_in_place_by_design():
    ScalesGradInPlace.apply(torch.randn(3, 4, requires_grad=True)).backward(torch.ones(3, 4))
'''


def test_fail_mode_fails_the_test_that_made_the_call_unless_accepted(pytester):
    write_suite(pytester.path, FAIL_SUITE)
    accepted = pytester.path / "accepted.json"
    accepted.write_text(json.dumps({"suite_ops.ScalesGradInPlace": {
        "mutates grad_output in place": "the gradient is scaled where it lies, to save memory"}}))
    result = run_in_process(pytester, "--backward-check=fail", "--backward-check-accepted", str(accepted))
    result.assert_outcomes(passed=1, failed=1)
    output = result.stdout.str()
    assert "FAILED test_suite.py::test_ignores_grad_output" in output, output
    assert "AssertionError: backward-check: the backward of suite_ops.IgnoresGradOutput, as this test called it " \
           "(float32 2-d), has 1 trap (ignores grad_output)" in output, output
    assert '{"suite_ops.IgnoresGradOutput": {"ignores grad_output": "why it is by design"}}' in output, output
    assert "--backward-check-accept-only 'suite_ops.IgnoresGradOutput=ignores grad_output'" in output, output
    in_place, = row(output, "suite_ops.ScalesGradInPlace")
    assert in_place.rstrip().endswith("accepted (mutates grad_output in place)"), in_place
    assert "accepted without a reason" not in output
    # the patches are gone with the session
    assert inspect.getattr_static(torch.autograd.Function, "apply") is TORCH_APPLY
    from torch._library.custom_ops import CustomOpDef
    assert CustomOpDef.__call__.__module__ == "torch._library.custom_ops"


FAILS_AT_THE_END = '''
import torch

from suite_ops import WrongInFloat64


def test_float32():
    WrongInFloat64.apply(torch.randn(4, 5, requires_grad=True)).sum().backward()


def test_float64():
    WrongInFloat64.apply(torch.randn(4, 5, dtype=torch.float64, requires_grad=True)).sum().backward()
'''


def test_fail_mode_fails_the_run_for_a_trap_found_at_the_sessions_end(pytester):
    """A new dtype is checked at the session's end, after every test has passed: the run fails (exit status 1),
    naming the test that made the call; in report mode the same run passes."""
    write_suite(pytester.path, FAILS_AT_THE_END)
    result = run_in_process(pytester, "--backward-check=fail")
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    output = result.stdout.str()
    assert "FAILED the run: a trap found at the session's end, in the call test_suite.py::test_float64 made: " \
           "suite_ops.WrongInFloat64 (float64 2-d): ignores grad_output" in output, output
    assert "--backward-check-accept-only 'suite_ops.WrongInFloat64=ignores grad_output'" in output, output
    assert run_in_process(pytester, "--backward-check").ret == pytest.ExitCode.OK


def test_accept_writes_every_trap_found_and_asks_for_the_reasons(pytester):
    """Each op checked lists what it showed, in the file's newer shape: a reason already written is kept, a trap
    accepted for the first time asks for one; an op this run never called keeps its entry, old shape or not."""
    from backward_check.plugin.accepted import REASON_WANTED
    write_suite(pytester.path, FAIL_SUITE)
    accepted = pytester.path / "accepted.json"
    accepted.write_text(json.dumps({"suite_ops.IgnoresGradOutput": ["a wrong formula"], "other::op": ["crashes"],
                                    "suite_ops.ScalesGradInPlace": {"mutates grad_output in place": "to save memory"}}))
    result = run_in_process(pytester, "--backward-check=fail", "--backward-check-accept",
                            "--backward-check-accepted", "accepted.json")
    result.assert_outcomes(passed=2)
    assert json.loads(accepted.read_text()) == {"other::op": {"crashes": ""},
                                                "suite_ops.IgnoresGradOutput": {"ignores grad_output": REASON_WANTED},
                                                "suite_ops.ScalesGradInPlace": {
                                                    "mutates grad_output in place": "to save memory"}}
    assert f"accepted file {accepted}: written, 3 op(s) listed; 2 trap(s) still want the reason they are by " \
           f"design: write it in the file" in result.stdout.str()
    result = run_in_process(pytester, "--backward-check", "--backward-check-accepted", "accepted.json")
    assert f"accepted without a reason ({accepted}): other::op: crashes, suite_ops.IgnoresGradOutput: ignores " \
           f"grad_output" in result.stdout.str(), result.stdout.str()


def test_accept_only_writes_the_pairs_it_names(pytester):
    write_suite(pytester.path, FAIL_SUITE)
    accepted = pytester.path / "accepted.json"
    result = run_in_process(pytester, "--backward-check", "--backward-check-accepted", "accepted.json",
                            "--backward-check-accept-only", "suite_ops.ScalesGradInPlace=mutates grad_output in place",
                            "--backward-check-accept-only", "suite_ops.IgnoresGradOutput=a wrong formula")
    result.assert_outcomes(passed=2)
    from backward_check.plugin.accepted import REASON_WANTED
    assert json.loads(accepted.read_text()) == {"suite_ops.ScalesGradInPlace": {
        "mutates grad_output in place": REASON_WANTED}}
    assert "not written, since this run did not find it: suite_ops.IgnoresGradOutput=a wrong formula" in \
        result.stdout.str()


@pytest.mark.parametrize("args, accepted, environment, message", [
    (["--backward-check=fails"], None, {}, "--backward-check takes report or fail (written --backward-check=fail), "
                                           "not 'fails'"),
    (["--backward-check", "--backward-check-limit", "0"], None, {}, "--backward-check-limit takes a number of "
                                                                     "signatures per op, 1 or more, not 0"),
    (["--backward-check", "--backward-check-budget", "half"], None, {},
     "--backward-check-budget takes a multiple of the suite's own time, more than 0 (1: the plugin takes as long as "
     "the suite), or all, not 'half'"),
    (["--backward-check", "--backward-check-budget", "0"], None, {}, "--backward-check-budget takes a multiple"),
    (["--backward-check", "--backward-check-memory", "-1"], None, {}, "--backward-check-memory takes MiB, 0 or "
                                                                      "more, not -1"),
    (["--backward-check-accept"], None, {}, "--backward-check-accept (or BACKWARD_CHECK_ACCEPT=1) writes the file "
                                            "that --backward-check-accepted names: name one"),
    (["--backward-check"], None, {"BACKWARD_CHECK_ACCEPT": "1"}, "--backward-check-accepted names: name one"),
    (["--backward-check", "--backward-check-accepted", "accepted.json"], {"my::op": ["ignore grad_output"]}, {},
     "'my::op' lists 'ignore grad_output' (did you mean 'ignores grad_output'?), which the checker has no trap of"),
    (["--backward-check", "--backward-check-accepted", "accepted.json"], {"my::op": {"ignore grad_output": "x"}}, {},
     "'my::op' lists 'ignore grad_output' (did you mean 'ignores grad_output'?), which the checker has no trap of"),
    (["--backward-check", "--backward-check-accepted", "accepted.json"], ["ignores grad_output"], {},
     'expected an object of op names, each with an object of trap names and the reason each is by design'),
    (["--backward-check", "--backward-check-accepted", "accepted.json"], {"my::op": {"crashes": 1}}, {},
     "'my::op' holds {'crashes': 1}; expected an object of op names"),
    (["--backward-check", "--backward-check-accepted", "missing.json"], None, {},
     "missing.json: no such file (--backward-check-accept writes it)"),
    (["--backward-check-accepted", "accepted.json", "--backward-check-accept-only", "my::op=ignore grad_output"],
     {}, {}, "--backward-check-accept-only 'my::op=ignore grad_output' names 'ignore grad_output' (did you mean "
             "'ignores grad_output'?), which the checker has no trap of"),
], ids=["mode", "limit", "budget-word", "budget-zero", "memory", "accept-without-file", "accept-from-environment",
        "misspelt-trap", "misspelt-trap-with-reason", "not-a-dict", "reason-not-a-string", "no-file",
        "accept-only-misspelt"])
def test_a_wrong_option_is_a_usage_error_without_a_traceback(pytester, monkeypatch, args, accepted, environment,
                                                             message):
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    if accepted is not None:
        (pytester.path / "accepted.json").write_text(json.dumps(accepted))
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    result = run_in_process(pytester, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str(), result.stderr.str()
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


@pytest.mark.parametrize("make", [
    lambda: torch.randn(4, 5),
    lambda: torch.randn(5, 4).t(),                      # transposed
    lambda: torch.randn(4, 8)[:, :5],                   # a padded view
    lambda: torch.randn(1, 5).expand(4, 5),             # stride 0, as after .sum(dim=0)
    lambda: torch.randn(()).expand(4, 5),               # strides all 0, as after .sum()
    lambda: torch.randn(3, 100_000)[:, 7:9],            # a narrow view of a far larger buffer: compacted
], ids=["contiguous", "transposed", "padded", "stride-0-row", "stride-0-all", "narrow-of-large"])
@pytest.mark.parametrize("requires_grad", [False, True])
def test_a_recorded_input_is_a_copy_laid_out_as_the_tests(make, requires_grad):
    from backward_check.plugin.recording import copy_tensor, layout_of
    original = make().requires_grad_(requires_grad)
    copied = copy_tensor(original)
    restored = copied.tensor()
    assert torch.equal(restored.detach(), original.detach())
    assert restored.requires_grad == requires_grad and restored.is_leaf
    assert layout_of(restored) == layout_of(original)
    assert [s == 0 for s in restored.stride()] == [s == 0 for s in original.stride()]
    if original.untyped_storage().nbytes() < 10_000:  # kept exactly, except for a narrow view of a large buffer
        assert restored.stride() == original.stride()
    assert restored.untyped_storage().data_ptr() != original.untyped_storage().data_ptr()
    assert copied.flat.numel() <= max(2 * original.numel(), original.untyped_storage().nbytes() // 4)


class Affine(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, grad_output):
        x, w = ctx.saved_tensors
        return grad_output * w, grad_output * x


def test_the_inputs_the_suite_passed_frozen_go_to_the_checker(monkeypatch):
    """A call that passes w frozen, then one that wants w's gradient: the check of the second is told that callers
    freeze w (position 1), and never x."""
    import backward_check
    from backward_check.plugin import child, worker
    from backward_check.plugin.recording import Recorder
    offered = []

    def keep(call, copy):
        call.args, call.kwargs = copy()
        offered.append(call)

    recorder = Recorder(keep)
    recorder.test = "test_affine"
    x = torch.randn(3, 4, requires_grad=True)
    recorder.consider(Affine, (x, torch.randn(3, 4)), {})
    recorder.consider(Affine, (x, torch.randn(3, 4, requires_grad=True)), {})
    assert recorder.problems == [] and len(offered) == 2
    assert recorder.frozen == {f"{__name__}.Affine": {1}}
    job = worker.job_of(offered[1], recorder.frozen[offered[1].name])
    assert job.frozen_by_callers == (1,) and job.no_grad == ()
    seen = {}

    def check_backward(fn, sample, *, name=None, no_grad=(), frozen_by_callers=()):
        seen.update(no_grad=no_grad, frozen_by_callers=frozen_by_callers)
        raise backward_check.UsageError("seen")

    monkeypatch.setattr(backward_check, "check_backward", check_backward)
    verdict, _ = child.check_once(Affine, job, job.args, job.kwargs, job.seed)
    assert verdict.summary == "not checked: seen" and seen == {"no_grad": (), "frozen_by_callers": (1,)}


def test_calls_past_the_memory_bound_are_left_out_and_counted(pytester):
    """With no room for copies, nothing is copied, nothing is checked, and the table says why, op by op."""
    write_suite(pytester.path, FAIL_SUITE)
    result = run_in_process(pytester, "--backward-check", "--backward-check-memory", "0")
    result.assert_outcomes(passed=2)
    output = result.stdout.str()
    for op in ("suite_ops.IgnoresGradOutput", "suite_ops.ScalesGradInPlace"):
        assert row(output, op, whole=True) == ["  (1 more signature not checked: 1 dropped to hold the copies within "
                                               "--backward-check-memory: 1 first call of the op)"], output
    assert "0 calls of 0 ops checked" in output and "worker process started" not in output, output
