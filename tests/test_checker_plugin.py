"""pytest --backward-check (backward-check/pytest_backward_check.py): the checker inside a library's own test suite,
with no new test code. Each test runs a small generated suite (a test file, and beside it the module of ops it
calls, which the plugin's worker process imports) with the plugin on or off, and reads the table it prints.

The main suite runs once, in a subprocess, for the tests that read its table (report mode: a correct op clean, a
planted bug named, a custom op by its op name, the limit per op, an op defined inside a test checked in the suite's
own process, calls under no_grad not recorded, and an op whose backward kills its process reported as the op's
fault, with the call, before the next op is checked by a fresh worker). The others run in this process through
pytester: off unless asked, =fail, the accepted file, and the usage errors.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

PACKAGE = Path(__file__).resolve().parent.parent / "backward-check"
sys.path.insert(0, str(PACKAGE))  # for pytester's runs in this process: -p pytest_backward_check

pytest_plugins = ["pytester"]

# The ops the generated suites call: module-level, so a worker process imports them by name.
OPS = '''
import resource
import signal
import threading

import torch


class Good(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return torch.tanh(x) * w

    @staticmethod
    def backward(ctx, grad_output):
        x, w = ctx.saved_tensors
        return grad_output * w * (1 - torch.tanh(x) ** 2), grad_output * torch.tanh(x)


class IgnoresGradOutput(torch.autograd.Function):  # the planted bug: the chain rule's grad_output left out
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return 2 * x


class ScalesGradInPlace(torch.autograd.Function):  # by design, in this library: an in-place gradient
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.mul_(2)


class DiesOnStrideZero(torch.autograd.Function):  # a kernel that faults on a grad_output of strides all 0
    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, grad_output):
        if grad_output.numel() > 1 and all(s == 0 for s in grad_output.stride()):
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file
            # to this thread, as a real fault is (on a GPU, autograd runs the backward in a thread of its own)
            signal.pthread_kill(threading.get_ident(), signal.SIGSEGV)
        return grad_output * 3


class Doubles(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * 2


class NeverChecked(Doubles):
    pass


@torch.library.custom_op("backward_check_plugin_test::scale", mutates_args=())
def scale(x: torch.Tensor, factor: float) -> torch.Tensor:
    return x * factor


def _setup_context(ctx, inputs, output):
    ctx.factor = inputs[1]


def _backward(ctx, grad_output):
    return grad_output * ctx.factor, None


scale.register_autograd(_backward, setup_context=_setup_context)
'''

# The main suite, run in report mode: every test passes with the plugin on, whatever it finds.
SUITE = '''
import gc
import json
import random
import weakref
from pathlib import Path

import numpy
import torch

from suite_ops import DiesOnStrideZero, Doubles, Good, IgnoresGradOutput, NeverChecked, scale

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


def test_draws_after_the_checks():
    draws = {"torch": torch.randn(4).tolist(), "python": random.random(), "numpy": float(numpy.random.rand())}
    Path("draws.json").write_text(json.dumps(draws))
'''


def write_suite(folder, suite, name="test_suite.py"):
    (folder / "suite_ops.py").write_text(OPS)
    (folder / name).write_text(suite)


def run_in_process(pytester, *args):
    return pytester.runpytest("-p", "pytest_backward_check", "-p", "no:cacheprovider", *args)


@pytest.fixture(scope="module")
def report_run(tmp_path_factory):
    """The main suite with the plugin on, in report mode, in a subprocess: (its output, its folder). The mode is
    left to its default, and the test file follows the option (`--backward-check test_suite.py`)."""
    folder = tmp_path_factory.mktemp("suite")
    write_suite(folder, SUITE)
    env = {**os.environ, "PYTHONPATH": str(PACKAGE)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "pytest_backward_check", "-p", "no:cacheprovider",
                           "-q", "--backward-check", "test_suite.py"], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=300)
    return done.stdout + done.stderr, folder, done.returncode


def row(output, op, contains=""):
    """The table's rows for op (the lines under its name, up to the next op's)."""
    lines = output.split("= backward-check =", 1)[1].splitlines()
    start = lines.index(op)
    rows = []
    for line in lines[start + 1:]:
        if not line.startswith("  "):
            break
        rows.append(line)
    return [r for r in rows if contains in r]


def test_report_mode_leaves_the_suite_passing(report_run):
    output, _, returncode = report_run
    assert returncode == 0, output
    assert "9 passed" in output, output
    assert "Traceback" not in output, output


def test_a_correct_op_is_clean_and_a_planted_bug_named(report_run):
    output, _, _ = report_run
    good, = row(output, "suite_ops.Good")
    assert good.rstrip().endswith("clean") and "float32 2-d, float32 2-d (no grad)" in good, good
    assert "test_suite.py::test_good" in good, good
    bug, = row(output, "suite_ops.IgnoresGradOutput")
    assert bug.rstrip().endswith("TRAP ignores grad_output"), bug
    assert "TRAP  ignores grad_output: " in output and "(the book: 17.1" in output  # its report, under the table


def test_a_custom_op_goes_by_its_op_name(report_run):
    output, _, _ = report_run
    custom, = row(output, "backward_check_plugin_test::scale")
    assert custom.rstrip().endswith("clean") and "float32 2-d, float" in custom, custom
    assert "CustomOpDef" not in output


def test_a_fault_is_the_ops_with_the_call_and_a_fresh_worker_goes_on(report_run):
    output, _, _ = report_run
    fault, = row(output, "suite_ops.DiesOnStrideZero")
    assert "FAULT the op's process was killed by SIGSEGV in the call: with a grad_output after .sum() (all " \
           "strides 0)" in fault and fault.rstrip().endswith("in its backward"), fault
    assert 'suite_ops.py", line' in output  # the frame of the op's backward the fault happened in
    assert "again after each of 1 fault" in output, output
    # the next op, checked by a fresh worker, is checked right (the custom op's row above is clean)
    assert row(output, "backward_check_plugin_test::scale", "test_custom_op_after_the_fault")


def test_the_limit_per_op(report_run):
    output, _, _ = report_run
    rows = row(output, "suite_ops.Doubles")
    assert len(rows) == 3, rows
    assert "float32 1-d" in rows[0] and "float32 2-d" in rows[1], rows
    assert rows[2].strip() == "(2 more signatures not checked: --backward-check-limit 2)", rows


def test_calls_under_no_grad_or_without_an_input_wanting_one_are_not_recorded(report_run):
    output, _, _ = report_run
    assert "NeverChecked" not in output


def test_an_op_defined_inside_a_test_is_checked_in_the_suites_process(report_run):
    output, _, _ = report_run
    local = row(output, "test_suite.test_local_op.<locals>.LocalDoubles")
    assert local[0].rstrip().endswith("clean"), local
    assert "checked in the suite's process: it is defined inside a function" in local[1], local


def test_off_unless_asked_and_the_random_generators_untouched(report_run, pytester):
    """The same suite with the plugin loaded but not asked for: nothing patched, no table; and every test's
    random draws after the checks are the ones the suite draws without them."""
    _, folder, _ = report_run
    write_suite(pytester.path, SUITE + '''

def test_nothing_patched():
    assert torch.autograd.Function.__dict__["apply"].__func__.__module__ == "torch.autograd.function"
''')
    result = run_in_process(pytester)
    result.assert_outcomes(passed=10)
    assert "backward-check" not in result.stdout.str()
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
    accepted.write_text(json.dumps({"suite_ops.ScalesGradInPlace": ["mutates grad_output in place"]}))
    result = run_in_process(pytester, "--backward-check=fail", "--backward-check-accepted", str(accepted))
    result.assert_outcomes(passed=1, failed=1)
    output = result.stdout.str()
    assert "FAILED test_suite.py::test_ignores_grad_output" in output, output
    assert "AssertionError: backward-check: the backward of suite_ops.IgnoresGradOutput, as this test called it " \
           "(float32 2-d), has 1 trap (ignores grad_output)" in output, output
    assert '{"suite_ops.IgnoresGradOutput": ["ignores grad_output"]}' in output, output
    in_place, = row(output, "suite_ops.ScalesGradInPlace")
    assert in_place.rstrip().endswith("TRAP mutates grad_output in place (accepted)"), in_place
    # the patches are gone with the session
    assert torch.autograd.Function.__dict__["apply"].__func__.__module__ == "torch.autograd.function"
    from torch._library.custom_ops import CustomOpDef
    assert CustomOpDef.__call__.__module__ == "torch._library.custom_ops"


def test_accept_rewrites_the_accepted_file(pytester):
    """Each op checked lists what it showed; an op this run never called keeps its entry."""
    write_suite(pytester.path, FAIL_SUITE)
    accepted = pytester.path / "accepted.json"
    accepted.write_text(json.dumps({"suite_ops.IgnoresGradOutput": ["a wrong formula"], "other::op": ["crashes"]}))
    result = run_in_process(pytester, "--backward-check=fail", "--backward-check-accept",
                            "--backward-check-accepted", "accepted.json")
    result.assert_outcomes(passed=2)
    assert json.loads(accepted.read_text()) == {"other::op": ["crashes"],
                                                "suite_ops.IgnoresGradOutput": ["ignores grad_output"],
                                                "suite_ops.ScalesGradInPlace": ["mutates grad_output in place"]}
    assert f"accepted file {accepted}: rewritten, 3 op(s) listed" in result.stdout.str()


@pytest.mark.parametrize("args, accepted, environment, message", [
    (["--backward-check=fails"], None, {}, "--backward-check takes report or fail (written --backward-check=fail), "
                                           "not 'fails'"),
    (["--backward-check", "--backward-check-limit", "0"], None, {}, "--backward-check-limit takes a number of "
                                                                     "signatures per op, 1 or more, not 0"),
    (["--backward-check-accept"], None, {}, "--backward-check-accept (or BACKWARD_CHECK_ACCEPT=1) rewrites the file "
                                            "that --backward-check-accepted names: name one"),
    (["--backward-check"], None, {"BACKWARD_CHECK_ACCEPT": "1"}, "--backward-check-accepted names: name one"),
    (["--backward-check", "--backward-check-accepted", "accepted.json"], {"my::op": ["ignore grad_output"]}, {},
     "'my::op' lists 'ignore grad_output' (did you mean 'ignores grad_output'?), which the checker has no trap of"),
    (["--backward-check", "--backward-check-accepted", "accepted.json"], ["ignores grad_output"], {},
     'expected an object of op names, each with a list of trap names'),
    (["--backward-check", "--backward-check-accepted", "missing.json"], None, {},
     "missing.json: no such file (--backward-check-accept writes it)"),
], ids=["mode", "limit", "accept-without-file", "accept-from-environment", "misspelt-trap", "not-a-dict",
        "no-file"])
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
    from backward_check.recording import copy_tensor, layout_of
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
