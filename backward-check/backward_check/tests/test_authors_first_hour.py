"""A library author's first hour with the checker: what they meet, and what they can act on.

- assert_backward fails with a named exception that carries the report;
- an op that takes a torch.Generator of its own is checked, not left undecided;
- the plugin leaves the suite's environment as it was (no TRITON_INTERPRET, no option passed through it);
- `--backward-check-accepted PATH` with a space, outside the folder pytest started in, is refused with a message
  that says to write `=` (pytest would take the path for a path to test while choosing its rootdir);
- an accepted trap is one short row, with no report after the table;
- the table fits the terminal, its test ids broken only where an id breaks;
- an op the budget never reached is named in the summary line (the schedule that reaches it is
  test_plugin_selection.py's);
- a repro script for each trap.
"""
import os
import sys

import pytest
import torch
from backward_check import DEVICE
from backward_check.tests.plugin_runs import PACKAGE, row, run_pytest

sys.path.insert(0, str(PACKAGE))

pytest_plugins = ["pytester"]

GENERATOR_OPS = '''
import torch


class Dropout(torch.autograd.Function):
    """Draws its mask from the generator it is passed, saves it, and multiplies grad_output by it: correct."""

    @staticmethod
    def forward(ctx, x, p, generator):
        mask = (torch.rand(x.shape, generator=generator, device=x.device) > p).to(x.dtype) / (1 - p)
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx, grad_output):
        mask, = ctx.saved_tensors
        return grad_output * mask, None, None


class DropoutIgnoresGradOutput(Dropout):
    @staticmethod
    def backward(ctx, grad_output):
        mask, = ctx.saved_tensors
        return mask, None, None


class InPlace(torch.autograd.Function):
    """Scales grad_output where it lies: the trap 'mutates grad_output in place', by design for this suite."""

    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.mul_(3)
'''


def load_ops(tmp_path):
    (tmp_path / "first_hour_ops.py").write_text(GENERATOR_OPS)
    sys.path.insert(0, str(tmp_path))
    try:
        import importlib
        import first_hour_ops
        return importlib.reload(first_hour_ops)
    finally:
        sys.path.remove(str(tmp_path))


# -- assert_backward's failure ---------------------------------------------------------------------------

def test_assert_backward_raises_a_named_assertion_error_that_carries_the_report(tmp_path):
    from backward_check.testing import BackwardCheckFailure, assert_backward
    ops = load_ops(tmp_path)
    x = torch.randn(8, 40, device=DEVICE)
    with pytest.raises(BackwardCheckFailure) as caught:
        assert_backward(ops.DropoutIgnoresGradOutput, x, 0.3, torch.Generator(device=DEVICE).manual_seed(1))
    failure = caught.value
    assert isinstance(failure, AssertionError)
    assert failure.traps == ("ignores grad_output",)
    assert "ignores grad_output" in failure.report.traps and str(failure.report) in str(failure)


# -- a generator argument -----------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 7])
def test_an_op_drawing_from_a_generator_it_is_passed_is_checked(tmp_path, seed):
    """Each call the checker makes starts the op's own generator where the caller's call did: the correct op is
    clean (it was 'undecided' on every check that compares two calls), its planted bug is named, and the caller's
    generator is left where the caller's own call left it."""
    from backward_check import check_backward
    ops = load_ops(tmp_path)
    generator = torch.Generator(device=DEVICE).manual_seed(seed)
    x = torch.randn(8, 40, generator=torch.Generator().manual_seed(seed + 1)).to(DEVICE)
    report = check_backward(ops.Dropout, x, 0.3, generator)
    assert report.clean and not report.undecided, report
    assert check_backward(ops.DropoutIgnoresGradOutput, x, 0.3, generator).traps == ["ignores grad_output"]
    # a generator on the CPU beside the kernels' device: the op runs where its generator is, as its caller made it
    cpu = torch.Generator().manual_seed(seed)
    assert check_backward(ops.Dropout, x.cpu(), 0.3, cpu).clean


# -- the plugin, in a suite ------------------------------------------------------------------------------

SUITE = '''
import os

import torch

from first_hour_ops import Dropout, InPlace


def test_the_environment_is_the_suites():
    assert "TRITON_INTERPRET" not in os.environ
    assert "BACKWARD_CHECK_COMPILE" not in os.environ


def test_dropout():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 30, requires_grad=True)
    Dropout.apply(x, 0.25, g).sum().backward()


def test_in_place_by_design():
    InPlace.apply(torch.randn(3, 4, requires_grad=True)).backward(torch.ones(3, 4))
'''


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    folder = tmp_path_factory.mktemp("first_hour")
    (folder / "first_hour_ops.py").write_text(GENERATOR_OPS)
    (folder / "test_suite.py").write_text(SUITE)
    (folder / "accepted.json").write_text('{"first_hour_ops.InPlace": {"mutates grad_output in place": '
                                          '"scaled where it lies, to save memory"}}')
    return folder


def run_without_interpreter(folder, *args, columns="1000"):
    """The suite run as a user on a CPU machine runs it: TRITON_INTERPRET unset."""
    saved = {k: os.environ.pop(k, None) for k in ("TRITON_INTERPRET",)}
    os.environ["COLUMNS"] = columns
    try:
        return run_pytest(folder, *args)
    finally:
        os.environ["COLUMNS"] = "1000"
        for k, v in saved.items():
            if v is not None:
                os.environ[k] = v


def test_the_plugin_leaves_the_environment_and_checks_the_generator_op(suite):
    code, output = run_without_interpreter(suite, "--backward-check", "--backward-check-accepted=accepted.json",
                                           "--backward-check-budget=all", "test_suite.py")
    assert code == 0 and "3 passed" in output, output
    dropout, = row(output, "first_hour_ops.Dropout")
    assert dropout.rstrip().endswith("clean"), dropout
    # the accepted trap: one row, and no report after the table
    in_place, = row(output, "first_hour_ops.InPlace")
    assert in_place.rstrip().endswith("accepted (mutates grad_output in place)"), in_place
    assert "- first_hour_ops.InPlace" not in output, output
    assert "(the book:" not in output, output


def test_compile_reaches_the_worker_without_the_environment(suite):
    code, output = run_without_interpreter(suite, "--backward-check", "--backward-check-compile=aot_eager",
                                           "--backward-check-accepted=accepted.json", "--backward-check-budget=all",
                                           "test_suite.py")
    assert code == 0 and "3 passed" in output, output  # the suite's environment holds no BACKWARD_CHECK_COMPILE
    assert row(output, "first_hour_ops.Dropout"), output


def test_a_narrow_terminal_gets_a_table_that_fits(suite):
    code, output = run_without_interpreter(suite, "--backward-check", "--backward-check-accepted=accepted.json",
                                           "--backward-check-budget=all", "test_suite.py", columns="72")
    # the table: from its header to pytest's next section (its warnings, the summary), less what the suite's other
    # plugins write to stderr (a GPU machine's pytest-benchmark warns of xdist there, in a line of its own width)
    after = output.split("= backward-check =", 1)[1].split("\n", 1)[1].splitlines()
    table = after[:next((k for k, line in enumerate(after) if line.startswith("=") and line.endswith("=")),
                        len(after))]
    table = [line for line in table if "Warning:" not in line]
    assert all(len(line) <= 72 for line in table), "\n".join(line for line in table if len(line) > 72)
    assert "    by test_suite.py::test_dropout" in table, output
    assert any(line.strip().endswith("clean") for line in table), output


def test_a_path_after_a_space_outside_the_start_folder_is_refused_with_the_fix(suite, tmp_path):
    outside = tmp_path / "accepted.json"
    outside.write_text((suite / "accepted.json").read_text())
    code, output = run_pytest(suite, "--backward-check", "--backward-check-accepted", str(outside), "test_suite.py")
    assert code == 4 and f"write --backward-check-accepted={outside} (with '=')" in output, output
    code, output = run_pytest(suite, "--backward-check", f"--backward-check-accepted={outside}", "--co", "-q",
                              "test_suite.py")
    assert code == 0 and "test_suite.py: 3" in output, output


# -- the table and the schedule, as data ------------------------------------------------------------------

def options():
    import pytest_backward_check
    return pytest_backward_check.Options("report", 1.0, None, None, 600.0, None, False, ())


def checked(op, test, verdict_status="clean", traps=(), accepted=()):
    from backward_check.plugin.findings import Checked
    from backward_check.plugin.verdicts import Verdict
    summary = "clean" if not traps else "TRAP " + "; ".join(traps)
    return Checked(op, "float32 2-d, int64 1-d, 'none', 0.0", test, Verdict(verdict_status, summary, "report",
                                                                             tuple(traps), 1.5), tuple(accepted))


LONG_TEST = "tests/transformers/test_cross_entropy.py::test_correctness[1.0-dtype0-1e-08-0.05-none-2-4096-32000]"


@pytest.mark.parametrize("width", [60, 80, 120, 200])
def test_every_line_of_the_table_fits_its_width_and_test_ids_break_where_ids_break(width):
    from backward_check.plugin.findings import ARGUMENTS_WIDTH, TEST_ID_BREAKS, TEST_WIDTH, WIDE, Findings, table
    from backward_check.plugin.verdicts import TRAPPED
    findings = Findings()
    findings.checked.append(checked("liger_kernel.ops.cross_entropy.LigerCrossEntropyFunction", LONG_TEST, TRAPPED,
                                     ("writes into an input or a saved tensor", "assumes a uniform grad_output"),
                                     ("writes into an input or a saved tensor",)))
    findings.leave_out("mylib.LateOp", "k", "time budget", 0)
    lines, _ = table(findings, {}, options(), width)
    assert all(len(line) <= width for line in lines), "\n".join(lines)
    text = " ".join(" ".join(lines).split())
    assert "TRAP assumes a uniform grad_output (accepted: writes into an input or a saved tensor)" in text, lines
    assert "1 op never checked: mylib.LateOp; --backward-check-budget=all checks them" in text, lines
    # the test id, read back from its column (wide) or from the lines after "by" (narrow), whole, each of its
    # lines but the last ending where a test id breaks
    after = lines[lines.index("liger_kernel.ops.cross_entropy.LigerCrossEntropyFunction") + 1:]
    row = after[:next(k for k, line in enumerate(after) if not line.startswith("  "))]
    if width >= WIDE:
        pieces = [line[2 + ARGUMENTS_WIDTH:2 + ARGUMENTS_WIDTH + TEST_WIDTH].strip() for line in row]
        pieces = [p for p in pieces if p]
    else:
        start = next(k for k, line in enumerate(row) if line.startswith("    by "))
        pieces = [row[start].removeprefix("    by ")]
        for line in row[start + 1:]:
            if len(line) - len(line.lstrip()) != 7:  # the id goes on indented seven; the seconds line four
                break
            pieces.append(line.strip())
    assert "".join(pieces) == LONG_TEST, pieces
    assert all(p[-1] in TEST_ID_BREAKS for p in pieces[:-1]), pieces


def test_an_op_another_worker_checked_is_not_named_never_checked():
    from backward_check.plugin.findings import Findings, never_checked_line
    findings = Findings()
    findings.leave_out("mylib.Elsewhere", "k", "another worker", 0)
    findings.leave_out("mylib.Dropped", "k", "memory", 0)
    assert never_checked_line(findings) == ["1 op never checked: mylib.Dropped; a larger --backward-check-memory "
                                            "keeps their copies"]


def test_the_summary_counts_as_checked_only_the_calls_that_were():
    """A row whose verdict is 'not checked' (a list of tensors, say) is not a call checked: the summary counts it
    apart, and its op among the ops checked only where another of its calls was."""
    from backward_check.plugin.findings import Findings, table
    from backward_check.plugin.verdicts import NOT_CHECKED, Verdict
    findings = Findings()
    findings.checked.append(checked("mylib.Clean", "t1"))
    for test in ("t2", "t3"):
        findings.checked.append(checked("mylib.TakesAList", test))
        findings.checked[-1].verdict = Verdict(NOT_CHECKED, "not checked: its argument 0 is a list of tensors")
    lines, _ = table(findings, {}, options(), 200)
    summary = next(line for line in lines if " checked in " in line)
    assert summary.startswith("1 call of 1 op checked in 1.5 s; 0 with a finding not accepted; 2 calls not checked, "
                              "as their rows say"), lines


# -- a repro for each trap --------------------------------------------------------------------------------

REPRO_SUITE = '''
import torch

from first_hour_ops import DropoutIgnoresGradOutput


def test_dropout_with_a_bug():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 30, requires_grad=True)
    DropoutIgnoresGradOutput.apply(x, 0.25, g).sum().backward()
'''


def test_a_trap_gets_a_repro_that_shows_it_again(tmp_path):
    """--backward-check-repro=DIR: the row names a script that loads the call's saved arguments (a generator
    among them) and checks the op again, from the folder the suite runs in: the same trap, exit status 1."""
    import subprocess
    (tmp_path / "first_hour_ops.py").write_text(GENERATOR_OPS)
    (tmp_path / "test_repro.py").write_text(REPRO_SUITE)
    code, output = run_pytest(tmp_path, "--backward-check", "--backward-check-repro=repro", "test_repro.py")
    assert code == 0, output
    lines = row(output, "first_hour_ops.DropoutIgnoresGradOutput", whole=True)
    assert lines[0].rstrip().endswith("TRAP ignores grad_output"), lines
    script = tmp_path / "repro" / "first_hour_ops.DropoutIgnoresGradOutput-1.py"
    assert f"repro: python {script}" in " ".join(lines), lines
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(PACKAGE), str(tmp_path)])})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "TRAP  ignores grad_output" in done.stdout, done.stdout + done.stderr
