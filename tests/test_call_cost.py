"""benchmarks/call_cost.py: its arguments and output files on tiny sizes (--dry-run).

The timings are the H200's, committed under benchmarks/results/; no test asserts a speed.
"""
import csv
import subprocess
import sys

import pytest
from chapter_scripts import ON_GPU, REPO


def run(*args):
    return subprocess.run([sys.executable, str(REPO / "benchmarks/call_cost.py"), *args], capture_output=True,
                          text=True, timeout=900, cwd=REPO)


@pytest.mark.skipif(ON_GPU, reason="a GPU is visible here")
def test_without_a_gpu_it_says_so_and_exits_2():
    result = run()
    assert result.returncode == 2 and "needs a CUDA GPU" in result.stderr and "--dry-run" in result.stderr


def test_a_dry_run_writes_every_rung_to_a_folder_of_its_own(tmp_path):
    committed = REPO / "benchmarks/results/call_cost_h200.csv"
    before = committed.read_bytes() if committed.exists() else None
    result = run("--dry-run", "--dtypes", "fp32", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    with open(tmp_path / "call_cost_dry-run.csv") as f:
        rows = list(csv.DictReader(f))
    rungs = {(r["rung"], r["launch"]) for r in rows}
    for rung in ("launch helper", "Function, no grad", "gelu(), no grad", "Function, forward + backward",
                 "define/impl op, forward + backward"):
        assert {(rung, "ordinary"), (rung, "lean")} <= rungs, rung
    assert ("F.gelu, forward + backward", "-") in rungs and ("the book's Function, forward + backward", "ordinary") in rungs
    assert {int(r["n"]) for r in rows} == {16, 64} and all(float(r["loop_us"]) > 0 for r in rows)
    assert all(float(r["ratio_to_f_gelu"]) == 1.0 for r in rows if r["rung"].startswith("F.gelu"))
    assert "Crossover (fp32)" in (tmp_path / "call_cost_dry-run.md").read_text()
    assert (committed.read_bytes() if committed.exists() else None) == before


def test_bad_arguments_are_refused():
    assert run("--dtypes", "fp8").returncode == 2
    assert run("--log2", "ten").returncode == 2
