"""benchmarks/mlp_step.py: its arguments and its output, on a tiny model (--dry-run).

The timings themselves are the H200's, committed under benchmarks/results/; a test
asserts no speed.
"""
import csv
import subprocess
import sys

import pytest
from chapter_scripts import ON_GPU, REPO


def run(*args):
    return subprocess.run([sys.executable, str(REPO / "benchmarks/mlp_step.py"), *args], capture_output=True,
                          text=True, timeout=600, cwd=REPO)


@pytest.mark.skipif(ON_GPU, reason="a GPU is visible here")
def test_without_a_gpu_it_says_so_and_exits_2():
    result = run()
    assert result.returncode == 2 and "needs a CUDA GPU" in result.stderr and "--dry-run" in result.stderr


def test_dry_run_writes_the_table_csv_and_summary(tmp_path):
    result = run("--dry-run", "--out", str(tmp_path), "--label", "dry")
    assert result.returncode == 0, result.stderr
    with open(tmp_path / "mlp_step_dry.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["dtype"], r["step"], r["activation"]) for r in rows] == [
        (dtype, step, name) for dtype in ("fp32", "bf16") for step in ("train", "infer")
        for name in ("nn.GELU", "TritonGELU", "triton_op", "gelu()")]
    assert all(r["blocks"] == "1" and r["d"] == "32" and r["tokens"] == "64" and r["mode"] == "eager" for r in rows)
    assert all(float(r["ratio_to_nn_gelu"]) == 1.0 for r in rows if r["activation"] == "nn.GELU")
    assert all(float(r["ms"]) > 0 for r in rows)
    summary = (tmp_path / "mlp_step_dry.md").read_text().splitlines()
    assert summary[0].startswith("| model | dtype | mode | step | nn.GELU ms |") and len(summary) == 2 + 4
    assert "1x d=32 | fp32 | eager | train" in summary[2]


def test_the_summary_gives_the_baseline_and_ratio_when_activations_leave_nn_gelu_out(tmp_path):
    """nn.GELU is timed as the baseline whatever --activations says: the summary gives its ms and the chosen
    activation's ratio (before, both cells were blank when nn.GELU was not among the activations)."""
    result = run("--dry-run", "--activations", "TritonGELU", "--out", str(tmp_path), "--label", "one")
    assert result.returncode == 0, result.stderr
    rows = [line.split("|") for line in (tmp_path / "mlp_step_one.md").read_text().splitlines()[2:]]
    assert len(rows) == 4 and all(float(r[5]) > 0 and r[6].strip().endswith("x") for r in rows), rows


@pytest.mark.parametrize("args, message", [
    (["--models", "1x"], "models are BLOCKSxD"),
    (["--dtypes", "fp8"], "unknown ['fp8']"),
    (["--modes", "jit"], "unknown ['jit']"),
    (["--tokens", "0"], "--tokens must be at least 1"),
], ids=["models", "dtypes", "modes", "tokens"])
def test_bad_arguments_are_refused(args, message):
    result = run(*args)
    assert result.returncode == 2 and message in result.stderr, result.stderr


def test_a_dry_run_never_touches_the_committed_results(tmp_path):
    committed = REPO / "benchmarks/results/mlp_step_h200.csv"
    before = committed.read_bytes()
    result = run("--dry-run")
    assert result.returncode == 0, result.stderr
    assert committed.read_bytes() == before
    written = [line for line in result.stdout.splitlines() + result.stderr.splitlines() if "mlp_step_dry-run.csv" in line]
    assert written and "benchmarks/results" not in written[0], written
    refused = run("--dry-run", "--label", "h200", "--out", str(REPO / "benchmarks/results"))
    assert refused.returncode == 2 and "would overwrite the committed results" in refused.stderr
    assert committed.read_bytes() == before
