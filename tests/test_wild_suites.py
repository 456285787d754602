"""research/wild/suites.py without a GPU and without the releases: how it reads the plugin's table (today's, and
the same rows wrapped), how it judges a release, what it runs (whole files, the plugin's default options), how
a release's runs share their deadline, how a suite past its deadline is stopped, and its refusals.

The runs themselves need a CUDA GPU and the downloaded releases (python research/wild/suites.py --download);
`--interpret --select EXPR` smoke-tests the plumbing in Triton's interpreter, by hand.
"""
import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TOOL = REPO / "research" / "wild" / "suites.py"
sys.path.insert(0, str(REPO / "backward-check"))
from backward_check.report import TRAPS  # noqa: E402

spec = importlib.util.spec_from_file_location("suites", TOOL)
suites = importlib.util.module_from_spec(spec)
spec.loader.exec_module(suites)

LIGER = suites.CASE_BY_NAME["liger-ce-none"]
FLA = suites.CASE_BY_NAME["fla-swish-flat"]
CE = "liger_kernel.ops.cross_entropy.LigerCrossEntropyFunction"
UNIFORM = "assumes a uniform grad_output"
WRITES = "writes into an input or a saved tensor"

# The plugin's closing table as an H200 run printed it (Liger-Kernel 0.5.8's cross-entropy tests, shortened to
# three rows, widths as printed), then the first per-signature report, whose evidence uses a trap's words.
TODAY = """\
-- Docs: https://docs.pytest.org/en/stable/how-to/capture-warnings.html
================================ backward-check ================================
op, and the arguments it was called with                first called by                                               seconds  verdict
liger_kernel.ops.cross_entropy.LigerCrossEntropyFunction
  bfloat16 2-d, int64 1-d, None, int, float, float, 'sum', None, Falsetest/transformers/test_cross_entropy.py::test_correctness[1.0-dtype0-1e-08-0.05-sum-2-4096-32000]      9.7  TRAP writes into an input or a saved tensor (accepted); a wrong formula
  bfloat16 2-d, int64 1-d, None, int, float, float, 'none', None, Falsetest/transformers/test_cross_entropy.py::test_correctness[1.0-dtype0-1e-08-0.05-none-2-4096-32000]      4.9  TRAP writes into an input or a saved tensor (accepted); assumes a uniform grad_output
  float32 2-d, int64 1-d, None, int, float, float, 'none', None, Falsetest/transformers/test_cross_entropy.py::test_correctness[1.0-dtype1-1e-08-1e-06-none-2-4096-32000]      6.8  TRAP writes into an input or a saved tensor (accepted); assumes a uniform grad_output
3 calls of 1 op checked in 21.4 s; 3 with a finding not accepted; worker process started 1 time (4.8 s)
- liger_kernel.ops.cross_entropy.LigerCrossEntropyFunction (bfloat16 2-d, int64 1-d, None, int, float, float, 'sum', None, False), first called by test/transformers/test_cross_entropy.py::test_correctness[1.0-dtype0-1e-08-0.05-sum-2-4096-32000] -
check_backward(liger_kernel.ops.cross_entropy.LigerCrossEntropyFunction): 2 traps found
  TRAP  a wrong formula [Chapter 16]: wrong even for a uniform grad_output of 2 (inf off, relative, under a random one)
=================== 12 passed, 1 warning in 64.20s (0:01:04) ===================
"""


def fixed_release(text):
    """The same table with the 'none' rows as the fixed release prints them, and a report after the table whose
    evidence names the uniform trap (the table, not the reports, is what counts)."""
    text = text.replace("(accepted); assumes a uniform grad_output", "(accepted)")
    return text.replace("  TRAP  a wrong formula [Chapter 16]", "  ok    not the trap 'assumes a uniform grad_output'")


def wrapped(text, width=70):
    """The table's rows wrapped at width, continuation lines indented deeper: a trap's name split over lines."""
    out = []
    for line in text.splitlines():
        if line.startswith("  ") and len(line) > width and not line.lstrip().startswith("TRAP  "):
            out += textwrap.wrap(line.strip(), width, initial_indent="  ", subsequent_indent="      ",
                                 break_long_words=True, break_on_hyphens=False)
        else:
            out.append(line)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("shape", [lambda t: t, wrapped], ids=["today", "wrapped"])
def test_the_plugins_table_names_the_traps_of_the_op(shape):
    text = shape(TODAY)
    if shape is wrapped:
        assert UNIFORM not in text and WRITES not in text, "each name is split over two lines"
    named, rows = suites.plugin_findings(text, CE, TRAPS)
    assert named == [t for t in TRAPS if t in (UNIFORM, WRITES, "a wrong formula")]
    assert suites.was_checked(rows)
    named, rows = suites.plugin_findings(shape(fixed_release(TODAY)), CE, TRAPS)
    assert UNIFORM not in named and WRITES in named, "the report after the table is not read"


def test_the_table_ends_at_the_next_rule_even_where_a_report_starts_with_the_ops_name():
    text = fixed_release(TODAY).replace(f"check_backward({CE}): 2 traps found", f"{CE} (bfloat16 2-d): 2 traps found")
    named, _ = suites.plugin_findings(text, CE, TRAPS)
    assert UNIFORM not in named


def test_notes_in_parentheses_and_other_ops_are_not_findings():
    text = TODAY.replace(
        "3 calls of 1 op",
        "  (accepted but not found, so the accepted file may drop it: assumes a\n"
        "   uniform grad_output)\n"
        "  (28 more signatures not checked: --backward-check-limit 2)\n"
        "other_lib.ops.Loss\n"
        "  float32 2-d                test_other.py::test_it      1.0  TRAP ignores grad_output\n"
        "3 calls of 1 op")
    named, _ = suites.plugin_findings(text, CE, TRAPS)
    assert "ignores grad_output" not in named
    named, rows = suites.plugin_findings(fixed_release(text), CE, TRAPS)
    assert UNIFORM not in named
    named, rows = suites.plugin_findings(text, "other_lib.ops.Loss", TRAPS)
    assert named == ["ignores grad_output"] and len(rows) == 1


def test_an_op_only_noted_was_not_checked():
    rows = ["  (30 signatures not checked: --backward-check-limit 0)", "  30 signatures left out: run with --x"]
    assert not suites.was_checked(rows)
    assert not suites.was_checked([])
    assert suites.was_checked(["  float32 3-d    tests/test_a.py::test_b[1-1-64]     2.0  clean"])


def test_no_table_no_findings():
    assert suites.plugin_findings("12 passed in 3.0s\n", CE, TRAPS) == ([], [])
    text = TODAY.replace(CE + "\n", "no autograd.Function or custom op was called with an input that requires grad\n")
    assert suites.plugin_findings(text, CE, TRAPS) == ([], [])


def a_run(case, role, code=0, interrupted=False, output=""):
    version = case.buggy if role == "buggy" else case.fixed
    return suites.Run(case, role, version, plugin=True, code=code, interrupted=interrupted, output=output)


CHECKED = ["  float32 3-d   tests/modules/test_activation.py::test_swish[2-512-128-False]   42.0  TRAP x"]


@pytest.mark.parametrize("role, named, rows, verdict", [
    ("buggy", [WRITES, UNIFORM], CHECKED, "as expected"),
    ("buggy", [WRITES], CHECKED, "NO: 'assumes a uniform grad_output' not named for LigerCrossEntropyFunction"),
    ("buggy", [], [], "NO: 'assumes a uniform grad_output' not named for LigerCrossEntropyFunction (not checked)"),
    ("fixed", [WRITES], CHECKED, "as expected"),
    ("fixed", [WRITES, UNIFORM], CHECKED, "NO: 'assumes a uniform grad_output' named for LigerCrossEntropyFunction"),
    ("fixed", [], ["  (2 signatures not checked)"], "NO: LigerCrossEntropyFunction not checked"),
])
def test_the_verdict_rule_for_one_function(role, named, rows, verdict):
    assert suites.judge(a_run(LIGER, role), {CE: (named, rows)}) == verdict


def test_every_function_of_a_case_is_judged():
    swish, sigmoid = FLA.functions
    flat = FLA.traps[0]
    assert suites.judge(a_run(FLA, "buggy"), {swish: ([flat], CHECKED), sigmoid: ([flat], CHECKED)}) == "as expected"
    verdict = suites.judge(a_run(FLA, "buggy"), {swish: ([flat], CHECKED), sigmoid: ([], CHECKED)})
    assert verdict.startswith("NO:") and "SigmoidFunction" in verdict and "SwishFunction" not in verdict
    verdict = suites.judge(a_run(FLA, "fixed"), {swish: ([], CHECKED), sigmoid: ([FLA.traps[1]], CHECKED)})
    assert verdict == f"NO: {FLA.traps[1]!r} named for SigmoidFunction"


def test_a_run_that_broke_is_no_verdict_but_one_the_deadline_interrupted_is_judged():
    findings = {CE: ([UNIFORM], CHECKED)}
    assert suites.judge(a_run(LIGER, "buggy", code=None), findings) == "NO: killed"
    assert suites.judge(a_run(LIGER, "buggy", code=4), findings) == "NO: pytest exit 4"
    assert suites.judge(a_run(LIGER, "buggy", code=2, interrupted=True), findings) == "as expected"


def test_outcome_reads_pytests_counts_and_marks_an_interrupted_run():
    assert suites.outcome(a_run(LIGER, "buggy", output=TODAY)) == "12 passed"
    assert suites.outcome(a_run(LIGER, "buggy", output="x\n3 failed, 9 passed in 2.0s\n")) == "3 failed, 9 passed"
    interrupted = a_run(LIGER, "buggy", code=2, interrupted=True, output="!!! KeyboardInterrupt !!!\n1 passed in 19.13s\n")
    assert suites.outcome(interrupted) == "1 passed (interrupted)"
    assert suites.outcome(a_run(LIGER, "buggy", code=3, output="INTERNALERROR>\n")) == "exit 3, no summary"
    assert suites.outcome(a_run(LIGER, "buggy", code=None)) == "killed at the deadline"


def test_a_releases_runs_share_its_deadline_and_the_timed_two_alike():
    assert suites.warm_up_deadline(330) == 110
    assert suites.timed_deadline(330, 50) == 140 and suites.timed_deadline(330, 110) == 110
    assert suites.timed_deadline(10, 30) == 1


def test_the_ratio_is_given_only_where_all_three_runs_ended_by_themselves():
    def timed(seconds, interrupted=False):
        return suites.Run(LIGER, "buggy", LIGER.buggy, False, code=0, seconds=seconds, interrupted=interrupted)
    assert suites.ratio(timed(30), timed(60), timed(90)) == "1.5x"
    assert suites.ratio(timed(110, interrupted=True), timed(60), timed(90)) == "-", "a warm-up cut short"
    assert suites.ratio(timed(30), timed(60), timed(140, interrupted=True)) == "-"


def test_whole_files_and_the_plugins_default_options(tmp_path):
    for case in suites.CASES:
        start = [sys.executable, "-m", "pytest", *case.tests, "-q", "--tb=short", "-p", "no:cacheprovider"]
        assert suites.suite_command(case, tmp_path, False, None) == start
        plugin = suites.suite_command(case, tmp_path, True, None)
        accepted = [f"--backward-check-accepted={suites.accepted_path(tmp_path, case).resolve()}"] if case.accepted else []
        assert plugin == start + ["-p", "pytest_backward_check", "--backward-check", *accepted]
        assert suites.suite_command(case, tmp_path, False, None, workers=4) == start + ["-n", "4"]
        assert suites.suite_command(case, tmp_path, True, None, workers=8, compile_check=True) == \
            start + ["-n", "8", "-p", "pytest_backward_check", "--backward-check", "--backward-check-compile", *accepted]
        assert not any("::" in test for test in case.tests), "whole files, not some of their tests"
        assert all(t in TRAPS for t in case.traps) and all(t in TRAPS for _, t, _ in case.accepted)
        assert case.functions and all(f.count(".") >= 2 for f in case.functions)
    assert len({c.library for c in suites.CASES}) >= 3
    assert set(FLA.functions) == {"fla.modules.activations.SwishFunction", "fla.modules.activations.SigmoidFunction"}


def test_the_accepted_file_lists_traps_by_op(tmp_path):
    text = suites.write_accepted(tmp_path, LIGER)
    assert json.loads(text) == json.loads(suites.accepted_path(tmp_path, LIGER).read_text()) == {CE: [WRITES]}


def test_a_suite_past_its_deadline_is_interrupted_and_prints_its_counts(tmp_path):
    (tmp_path / "test_slow.py").write_text("import time\n\ndef test_quick():\n    pass\n\n"
                                           "def test_slow():\n    time.sleep(120)\n")
    # A shell that starts a command in the background without job control (`make test &` in a script) starts it
    # with SIGINT ignored, and its children inherit that: pytest would sleep through the interrupt. The suite here
    # takes Ctrl-C as a terminal's would, whatever this test's process inherited.
    honours_ctrl_c = ("import signal, sys, pytest; signal.signal(signal.SIGINT, signal.default_int_handler); "
                      "sys.exit(pytest.main(sys.argv[1:]))")
    process = subprocess.Popen([sys.executable, "-c", honours_ctrl_c, str(tmp_path / "test_slow.py"), "-q",
                                "-p", "no:cacheprovider"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    output, interrupted, killed = suites.stop(process, 30)  # room for pytest to start on a loaded machine
    assert interrupted and not killed and process.returncode == 2, (killed, process.returncode, output[-3000:])
    assert "KeyboardInterrupt" in output and "interrupted at the 30 s deadline" in output
    run = suites.Run(LIGER, "buggy", LIGER.buggy, False, code=2, interrupted=True, output=output)
    assert suites.outcome(run) == "1 passed (interrupted)"


def run_tool(*args):
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=120)


def test_list_names_every_case_its_files_and_functions():
    done = run_tool("--list")
    assert done.returncode == 0
    for case in suites.CASES:
        assert case.name in done.stdout and all(f in done.stdout for f in case.functions)
        assert all(t in done.stdout for t in case.tests)


@pytest.mark.parametrize("args, said", [
    ([], "give one of"),
    (["--run", "--jobs", "0"], "positive"),
    (["--run", "--warm-workers", "-1"], "0 or a positive"),
    (["--download"], "--download needs a clone of each library"),
    (["--download", "--git", "nolib=/x"], "--git takes NAME=PATH"),
])
def test_bad_arguments_exit_2_without_a_traceback(args, said):
    done = run_tool(*args)
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr


def test_releases_not_downloaded_exit_2_naming_them(tmp_path):
    done = run_tool("--run", str(tmp_path))
    assert done.returncode == 2 and "lacks liger-kernel 0.5.8" in done.stderr and "--download" in done.stderr


def test_the_table_shows_each_functions_traps_or_why_none():
    swish, sigmoid = FLA.functions
    assert suites.shown_findings(LIGER, {CE: ([WRITES, UNIFORM], CHECKED)}) == f"{WRITES}, {UNIFORM}"
    shown = suites.shown_findings(FLA, {swish: ([], CHECKED), sigmoid: ([], [])})
    assert shown == "SwishFunction: no trap; SigmoidFunction: not in the table"
    assert suites.shown_findings(LIGER, {CE: ([], ["  (2 signatures not checked)"])}) == "not checked"


# -- research/wild/liger_token_scaling.py: the probe of a finding --------------------------------------------------------

def test_the_token_scaling_probe_says_what_it_decides_and_needs(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "research" / "wild" / "liger_token_scaling.py"), "--help"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "detached" in done.stdout and "0.8.1" in done.stdout, done.stdout + done.stderr


FAKE_FUSED_LOSS = '''
import torch


class LigerFusedLinearCrossEntropyFunction:
    """Stands in for the fused loss under use_token_scaling, in plain torch: DETACH says whether the scale is held
    constant in the gradient, as the library means it."""

    @staticmethod
    def apply(x, weight, target, bias, *rest):
        logits = x @ weight.t() + bias
        per_row = torch.nn.functional.cross_entropy(logits, target, reduction="none")
        scale = torch.softmax(logits, dim=-1).gather(1, target[:, None]).squeeze(-1)
        return (per_row * (scale.detach() if DETACH else scale),)
'''


@pytest.mark.parametrize("detach", [True, False])
def test_the_token_scaling_probe_tells_a_held_scale_from_a_differentiated_one(tmp_path, detach):
    """The probe on a stand-in for the library: a gradient that holds the scale constant matches the test's
    reference under every grad_output; one that differentiates the scale is off under each of them."""
    module = tmp_path / "liger_kernel" / "ops"
    module.mkdir(parents=True)
    for folder in (tmp_path / "liger_kernel", module):
        (folder / "__init__.py").write_text("")
    (module / "fused_linear_cross_entropy.py").write_text(f"DETACH = {detach}\n" + FAKE_FUSED_LOSS)
    done = subprocess.run([sys.executable, str(REPO / "research" / "wild" / "liger_token_scaling.py"), "--child",
                           str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    offs = [float(line.split("gradient ")[1].split()[0]) for line in done.stdout.splitlines()]
    assert len(offs) == 3, done.stdout
    assert all(off < 1e-5 for off in offs) if detach else all(off > 1e-3 for off in offs), done.stdout


FAKE_FUSED_LOSS_SCALING_IN_PLACE = '''
import torch


class LigerFusedLinearCrossEntropyFunction(torch.autograd.Function):
    """Stands in for Liger-Kernel's fused loss as its kernels are: the gradient worked out in the forward (the scale
    held constant) and saved, then scaled in place by grad_output in the backward, right for each call alone."""

    @staticmethod
    def forward(ctx, x, weight, target, bias, *rest):
        with torch.enable_grad():
            x_ = x.detach().requires_grad_()
            logits = x_ @ weight.t() + bias
            per_row = torch.nn.functional.cross_entropy(logits, target, reduction="none")
            scale = torch.softmax(logits, dim=-1).gather(1, target[:, None]).squeeze(-1).detach()
            rows = [torch.autograd.grad(per_row[r] * scale[r], x_, retain_graph=True)[0][r] for r in range(len(x))]
        ctx.save_for_backward(torch.stack(rows))
        return (per_row * scale).detach(),

    @staticmethod
    def backward(ctx, grad_output):
        saved, = ctx.saved_tensors
        return saved.mul_(grad_output[:, None]), None, None, None, *([None] * 11)
'''


def test_the_token_scaling_probe_makes_a_fresh_call_for_each_grad_output(tmp_path):
    """A backward that scales what it saved in place (as Liger-Kernel's does) is right for each call alone: the probe
    takes each grad_output's gradient on a call of its own, never a second backward over one graph."""
    module = tmp_path / "liger_kernel" / "ops"
    module.mkdir(parents=True)
    for folder in (tmp_path / "liger_kernel", module):
        (folder / "__init__.py").write_text("")
    (module / "fused_linear_cross_entropy.py").write_text(FAKE_FUSED_LOSS_SCALING_IN_PLACE)
    done = subprocess.run([sys.executable, str(REPO / "research" / "wild" / "liger_token_scaling.py"), "--child",
                           str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    offs = [float(line.split("gradient ")[1].split()[0]) for line in done.stdout.splitlines()]
    assert len(offs) == 3 and all(off < 1e-5 for off in offs), done.stdout


# -- research/wild/check_cost.py: what it needs, said plainly --------------------------------------------------------

@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="with a GPU it times the real kernels instead")
def test_check_cost_without_a_gpu_says_what_it_needs():
    done = subprocess.run([sys.executable, str(REPO / "research" / "wild" / "check_cost.py")], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2 and "no CUDA GPU" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_check_cost_help_names_what_it_times():
    done = subprocess.run([sys.executable, str(REPO / "research" / "wild" / "check_cost.py"), "--help"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "--rows" in done.stdout and "Liger" in done.stdout, done.stdout + done.stderr


def test_check_cost_breakdown_times_each_check_and_profiles_it():
    """--breakdown's parts run on any device (on a GPU it profiles Liger's kernels): on a small op here, one run of
    the check, each check that ran named with its seconds, the set-up, the profiler's wall clock, and its table."""
    import torch
    from backward_check.plugin import worker
    sys.path.insert(0, str(REPO / "tests"))
    from checker_zoo import one_input

    spec = importlib.util.spec_from_file_location("check_cost", REPO / "research" / "wild" / "check_cost.py")
    check_cost = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check_cost)
    cube = one_input(lambda x: x ** 3, lambda x, g: (3 * x * x * g[0],), "CubeFirstElement")  # a uniform grad_output
    job = worker.Job("CubeFirstElement", (), {}, (), (), seed=5)
    lines = []
    check_cost.breakdown(cube, job, lambda: ((torch.randn(3, 5, requires_grad=True),), {}), lines.append)
    text = "\n".join(lines)
    assert lines[0].startswith("  one run of the check:") and UNIFORM in lines[0], text
    profiled = next(k for k, line in enumerate(lines) if "under torch.profiler" in line)
    timed = dict(line.strip().rsplit(None, 1) for line in lines[2:profiled])
    assert {"random grad_output", "the layouts autograd hands on"} <= set(timed), text
    assert sum(map(float, timed.values())) <= float(lines[0].split()[5]) + 0.01, text
    assert "under torch.profiler" in text and "operators by their own CPU time" in text and "Self CPU" in text, text
