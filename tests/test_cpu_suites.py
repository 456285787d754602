"""research/wild/cpu_suites.py and its probes, without the libraries.

The tool runs four CPU libraries' own tests under the plugin and decides every trap named by a
probe. Here, with none of the libraries installed: its table of findings must name real traps and
real probes, it must read the plugin's closing table (every op, even one with no trap), it must
see a test that fails only under the plugin, and it must refuse to run what was not downloaded.
"""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOOL = REPO / "research" / "wild" / "cpu_suites.py"
sys.path.insert(0, str(REPO / "research" / "wild"))
sys.path.insert(0, str(REPO / "backward-check"))
import cpu_suites  # noqa: E402
from backward_check.report import TRAPS  # noqa: E402

# The closing table of a plugin run, as pytest_backward_check.py writes it: an op with two rows (one a trap),
# an op whose row is clean, a note under a row, and the line that ends the table.
PLUGIN_OUTPUT = """\
..F.                                                                   [100%]
================================ backward-check ================================
op, and the arguments it was called with        first called by      seconds  verdict
mylib.ops.Solve
  float32 2-d, float32 2-d                      test_a.py::test_one      4.0  TRAP a wrong formula
    (checked in the suite's process: its arguments cannot be sent to a worker process)
  float32 1-d, float32 2-d                      test_a.py::test_two      2.1  clean
mylib.ops.Matmul
  float32 2-d, float32 2-d                      test_a.py::test_three    0.9  clean
3 calls of 2 ops checked in 7.0 s; 1 with a finding not accepted
=========================== short test summary info ============================
FAILED test_a.py::test_four - TypeError: sequence item 3: expected str instance, tuple found
1 failed, 3 passed in 9.00s
"""


def test_every_finding_names_a_trap_a_probe_and_a_kind():
    for decided in cpu_suites.FINDINGS:
        assert decided.trap in TRAPS, decided
        assert decided.probe in cpu_suites.PROBES, decided
        assert decided.kind in (cpu_suites.REAL, cpu_suites.BY_DESIGN, cpu_suites.FALSE_ALARM), decided
        assert decided.suite in cpu_suites.SUITE_BY_NAME, decided


def test_the_plugins_table_is_read_op_by_op():
    assert cpu_suites.table_ops(PLUGIN_OUTPUT) == ["mylib.ops.Solve", "mylib.ops.Matmul"]
    found = cpu_suites.findings_of(None, PLUGIN_OUTPUT, TRAPS)
    assert found["mylib.ops.Solve"][0] == ["a wrong formula"]
    assert found["mylib.ops.Matmul"][0] == []
    assert cpu_suites.table_ops("1 passed in 0.1s\n") == []


def test_a_test_that_fails_only_under_the_plugin_is_seen():
    assert cpu_suites.failed_tests(PLUGIN_OUTPUT) == {"test_a.py::test_four"}
    assert cpu_suites.failed_tests("3 passed in 1.00s\n") == set()


def test_a_finished_and_a_killed_run_are_each_summed_up_in_a_line():
    # run_everything prints suites.outcome(ran) for each run; a Ran of this module's must carry what it reads
    import suites
    passed = cpu_suites.Ran("plain", ["pytest"], code=0, seconds=3.0, output="== 12 passed, 1 skipped in 3.0s ==\n")
    killed = cpu_suites.Ran("plain", ["pytest"], code=None, seconds=9.0, output="(killed after 9 s)\n")
    assert "12 passed" in suites.outcome(passed) and "interrupted" not in suites.outcome(passed)
    assert suites.outcome(killed) == "killed at the deadline"


def test_a_suite_not_downloaded_is_refused(tmp_path):
    done = subprocess.run([sys.executable, str(TOOL), "--run", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 2
    assert "lacks" in done.stderr and "--download" in done.stderr


def test_download_without_a_clone_says_which_to_make(tmp_path):
    done = subprocess.run([sys.executable, str(TOOL), "--download", str(tmp_path), "--suite", "entmax"],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert "git clone https://github.com/deep-spin/entmax" in done.stderr


def test_a_timeout_below_one_second_is_refused(capsys, tmp_path):
    """--timeout 0 would end every run at once and leave a table of no rows: refused, exit 2, one line."""
    import pytest
    with pytest.raises(SystemExit) as done:  # a log of its own: the tool before this rule ran, and wrote its log
        cpu_suites.main(["--run", str(tmp_path), "--timeout", "0", "--log", str(tmp_path / "run.log")])
    assert done.value.code == 2 and "--timeout" in capsys.readouterr().err


def test_a_probe_without_its_library_exits_2_not_1():
    """Exit 1 from a probe reads as a finding: a library that is not importable is a usage error, said in one line."""
    import importlib.util
    import pytest
    probe = next(name for name in cpu_suites.PROBES if name.startswith("torchdiffeq"))
    if importlib.util.find_spec("torchdiffeq") is not None:
        pytest.skip("torchdiffeq is importable here")
    done = subprocess.run([sys.executable, str(REPO / "research" / "wild" / "cpu_probes.py"), probe],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 2 and "torchdiffeq is not importable" in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
