"""pytest --backward-check under pytest-xdist (backward-check/backward_check/plugin/xdist.py): each worker records and
checks its own tests' calls, and the controller prints one table. A signature is checked once across workers,
however many of them make the call (under --dist each, both workers run every test); =fail fails the test that made
the call on whichever worker ran it, and the run for a trap found at a worker's end; the accepted file is read by
every worker and written once, by the controller.
"""
import json
import os

import pytest
from backward_check.tests.plugin_runs import row, run_pytest, write_suite

pytest.importorskip("xdist")

SUITE = '''
import torch

from suite_ops import Doubles, Good, IgnoresGradOutput, ScalesGradInPlace, WrongInFloat64


def test_good():
    Good.apply(torch.randn(4, 5, requires_grad=True), torch.randn(4, 5)).sum().backward()


def test_ignores_grad_output():
    IgnoresGradOutput.apply(torch.randn(6, 7, requires_grad=True)).sum().backward()


def test_in_place_by_design():
    ScalesGradInPlace.apply(torch.randn(3, 4, requires_grad=True)).backward(torch.ones(3, 4))


def test_doubles_once():
    Doubles.apply(torch.randn(5, requires_grad=True)).sum().backward()


def test_doubles_again():
    Doubles.apply(torch.randn(7, requires_grad=True)).sum().backward()


def test_float32_then_float64():  # the float64 call is a new dtype: checked at the worker's end
    WrongInFloat64.apply(torch.randn(4, 5, requires_grad=True)).sum().backward()
    WrongInFloat64.apply(torch.randn(4, 5, dtype=torch.float64, requires_grad=True)).sum().backward()
'''


def run_suite(folder, *options):
    return run_pytest(folder, "-n", "2", "--backward-check-budget=all", *options, "test_suite.py")


@pytest.fixture(scope="module")
def fail_run(tmp_path_factory):
    """-n 2 with =fail and an accepted file: (exit status, output)."""
    folder = tmp_path_factory.mktemp("xdist")
    write_suite(folder, SUITE)
    (folder / "accepted.json").write_text(json.dumps({"suite_ops.ScalesGradInPlace": {
        "mutates grad_output in place": "the gradient is scaled where it lies"}}))
    return run_suite(folder, "--backward-check=fail", "--backward-check-accepted", "accepted.json")


def test_the_controller_prints_one_table_of_every_workers_calls(fail_run):
    _, output = fail_run
    assert "no autograd.Function or custom op was called" not in output, output
    good, = row(output, "suite_ops.Good")
    assert good.rstrip().endswith("clean"), good
    bug, = row(output, "suite_ops.IgnoresGradOutput")
    assert bug.rstrip().endswith("TRAP ignores grad_output"), bug
    assert "across 2 pytest-xdist workers" in output, output


def test_a_signature_made_on_both_workers_is_checked_once(fail_run):
    _, output = fail_run
    doubles = row(output, "suite_ops.Doubles")
    assert len(doubles) == 1 and doubles[0].rstrip().endswith("clean"), doubles


def test_fail_mode_and_the_accepted_file_work_on_the_workers(fail_run):
    code, output = fail_run
    assert code == 1, output
    assert "FAILED test_suite.py::test_ignores_grad_output" in output, output
    assert "1 failed, 5 passed" in output, output
    in_place, = row(output, "suite_ops.ScalesGradInPlace")
    assert in_place.rstrip().endswith("accepted (mutates grad_output in place)"), in_place
    assert "FAILED the run: a trap found at the session's end, in the call test_suite.py::test_float32_then_float64 " \
           "made: " \
           "suite_ops.WrongInFloat64 (float64 2-d): ignores grad_output" in output, output


def test_under_dist_each_every_signature_is_checked_once_and_accept_writes_the_file_once(tmp_path):
    """Both workers run every test, so each signature is made on both: each is checked by one worker, and the
    other's is counted as checked there; the controller writes the accepted file from the merged findings."""
    write_suite(tmp_path, SUITE)
    code, output = run_suite(tmp_path, "--dist", "each", "--backward-check", "--backward-check-accept",
                             "--backward-check-accepted", "accepted.json")
    assert code == 0, output
    for op in ("suite_ops.Good", "suite_ops.IgnoresGradOutput", "suite_ops.ScalesGradInPlace"):
        rows = row(output, op, whole=True)
        assert len(rows) == 2, rows
        assert rows[1].strip() == "(1 signature checked by another pytest-xdist worker, shown in its row)", rows
    assert len(row(output, "suite_ops.WrongInFloat64")) == 2
    assert "checked twice" not in output
    written = json.loads((tmp_path / "accepted.json").read_text())
    assert sorted(written) == ["suite_ops.IgnoresGradOutput", "suite_ops.ScalesGradInPlace",
                               "suite_ops.WrongInFloat64"], written
    assert output.count("accepted file ") == 1, output


def test_a_signature_one_worker_left_out_and_another_checked_is_not_counted_left_out():
    """The controller's table counts a signature left out only where no worker checked it, and once however many
    workers left it out."""
    from backward_check.plugin.findings import Checked, Findings, table
    from backward_check.plugin.selection import BUDGET, COMBINATION, ELSEWHERE, VALUE
    from backward_check.plugin.verdicts import CLEAN, Verdict
    from pytest_backward_check import Options
    first, second = Findings(), Findings()
    first.checked.append(Checked("op", "float32 1-d", "t", Verdict(CLEAN, "clean"), (), worker="gw0", key="x"))
    first.leave_out("op", "y", BUDGET, COMBINATION)
    second.leave_out("op", "x", BUDGET, VALUE)     # checked by gw0
    second.leave_out("op", "y", BUDGET, COMBINATION)
    second.leave_out("op", "z", ELSEWHERE, VALUE)
    merged = Findings()
    merged.merge(first)
    merged.merge(second)
    options = Options("report", 1.0, None, None, 600.0, None, False, ())
    lines, _ = table(merged, {}, options)
    assert "  (1 more signature not checked: 1 past the time budget (--backward-check-budget=all checks them): " \
           "1 combining values already checked)" in lines, lines
    assert "  (1 signature checked by another pytest-xdist worker, shown in its row)" in lines, lines


def test_a_worker_without_the_shared_folder_checks_its_calls_itself(tmp_path):
    """A worker on another machine does not see the controller's folder: it claims every signature for itself
    (the table then shows a signature checked on two machines twice, and says so)."""
    import torch
    from backward_check.plugin.recording import RecordedCall, signature_of
    from backward_check.plugin.xdist import Claims
    signature, described = signature_of((torch.zeros(3, requires_grad=True),), {}, {})
    claims = Claims(str(tmp_path / "not-here"), "gw0")
    assert claims.claim(RecordedCall(None, "op", signature, described, (), "t", 0)) and claims.others() == []


# -- several GPUs: each xdist worker's checks on its own GPU (tested without one) ------------------------------------

def test_each_xdist_worker_checks_on_its_own_gpu_round_robin():
    from backward_check.plugin.worker import gpu_for_worker
    assert [gpu_for_worker(f"gw{n}", ["0", "1", "2", "3"]) for n in range(6)] == ["0", "1", "2", "3", "0", "1"]
    assert gpu_for_worker("gw4", ["2", "5", "7"]) == "5"  # CUDA_VISIBLE_DEVICES's names, in its order
    # outside pytest-xdist, with one GPU, or for a worker id xdist does not give: what the suite sees
    assert [gpu_for_worker(w, v) for w, v in [(None, ["0", "1"]), ("gw1", ["0"]), ("master", ["0", "1"]),
                                              ("gw1", [])]] == [None] * 4


def test_the_check_process_sees_its_workers_gpu_alone_and_loads_the_suites_tensors_onto_it(monkeypatch, tmp_path):
    """The environment a check process starts with under worker gw3 of a suite that sees GPUs 4 to 7: GPU 7 alone,
    and torch.load mapping every CUDA device onto the one it sees, CPU tensors left on the CPU. None of it on the
    CPU, or outside xdist."""
    import torch
    from backward_check.plugin import child
    from backward_check.plugin.worker import own_gpu_environment
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    assert own_gpu_environment("cuda", "gw3") == {"CUDA_VISIBLE_DEVICES": "7", child.ONE_GPU: "1"}
    assert own_gpu_environment("cpu", "gw3") == {} and own_gpu_environment("cuda", None) == {}
    monkeypatch.setenv(child.ONE_GPU, "1")
    assert child.gpu_map()["cuda:3"] == "cuda:0" and "cpu" not in child.gpu_map()
    torch.save({"x": torch.arange(3)}, tmp_path / "parcel")
    assert child.unpacked("file", str(tmp_path / "parcel"))["x"].device.type == "cpu"
    monkeypatch.delenv(child.ONE_GPU)
    assert child.gpu_map() is None


def test_the_environment_a_check_process_starts_with_is_the_suites_again_after(monkeypatch):
    from backward_check.plugin.child import environment_while_starting
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.delenv("BACKWARD_CHECK_ONE_GPU", raising=False)
    with environment_while_starting(CUDA_VISIBLE_DEVICES="1", BACKWARD_CHECK_ONE_GPU="1"):
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1" and "BACKWARD_CHECK_ONE_GPU" not in os.environ
    # a default stands only where the suite set nothing: the user's CUDA_LAUNCH_BLOCKING=0 is kept
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "0")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with environment_while_starting({"CUDA_LAUNCH_BLOCKING": "1", "TRITON_INTERPRET": "1"}):
        assert os.environ["CUDA_LAUNCH_BLOCKING"] == "0" and os.environ["TRITON_INTERPRET"] == "1"
    assert os.environ["CUDA_LAUNCH_BLOCKING"] == "0" and "TRITON_INTERPRET" not in os.environ
