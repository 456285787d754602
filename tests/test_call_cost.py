"""benchmarks/call_cost.py and its modes: arguments, the A/A arithmetic, and a dry run's files.

The timings are the H200's, committed under benchmarks/results/; no test asserts a speed. The
GPU-only paths (graph capture, compile, the engine's threads) are in test_call_cost_gpu.py.
"""
import csv
import re
import subprocess
import sys
from pathlib import Path

import pytest
from chapter_scripts import ON_GPU, REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import call_cost  # noqa: E402
import call_cost_timing as timing  # noqa: E402


def run(script, *args):
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args], capture_output=True,
                          text=True, timeout=900, cwd=REPO)


@pytest.mark.skipif(ON_GPU, reason="a GPU is visible here")
@pytest.mark.parametrize("script", ["call_cost.py", "call_cost_eager.py", "call_cost_handoff.py"])
def test_without_a_gpu_it_says_so_and_exits_2(script):
    result = run(script)
    assert result.returncode == 2 and "needs a CUDA GPU" in result.stderr and "--dry-run" in result.stderr


@pytest.mark.parametrize("script, args", [("call_cost.py", ["--modes", "eager,bogus"]), ("call_cost.py", ["--log2", "ten"]),
                                          ("call_cost.py", ["--rounds", "0"]), ("call_cost_eager.py", ["--log2", "ten"]),
                                          ("call_cost.py", ["--log2", "-3"]), ("call_cost_eager.py", ["--log2", "-3"]),
                                          ("call_cost.py", ["--dry-run", "--label", "a/b"]),      # a folder in a name
                                          ("call_cost.py", ["--dry-run", "--out", "README.md"]),  # a file, not a folder
                                          ("call_cost_eager.py", ["--dry-run", "--rows", "docs"])])  # refused before the run
def test_bad_arguments_are_refused_in_one_line(script, args):
    result = run(script, *args)
    assert result.returncode == 2 and "Traceback" not in result.stderr and "error:" in result.stderr


# --- the timing: interleaved rounds, medians, the A/A control ---------------------

def fake_rungs(times):
    """Rungs whose call records the order they ran in and whose loops 'take' the given seconds."""
    order = []
    rungs = []
    for name, seconds in times.items():
        rung = timing.Rung("group", name, call=lambda name=name: order.append(name))
        rung.fake = list(seconds)
        rungs.append(rung)
    return rungs, order


def test_rounds_rotate_the_order_and_the_figures_are_medians(monkeypatch):
    rungs, order = fake_rungs({"F.gelu": [1, 3, 2, 9], "F.gelu" + timing.AA_SUFFIX: [2, 2, 2, 2], "TritonGELU": [4, 4, 5, 4]})
    by_name = {r.name: r for r in rungs}
    monkeypatch.setattr(timing, "calibrate", lambda rung, *args, **kwargs: 1)
    monkeypatch.setattr(timing, "loop", lambda rung, calls, sync: (rung.call(), rung.fake.pop(0))[1])
    timing.time_group(rungs, rounds=4, target_s=0.01, synchronize=lambda: None, report=lambda line: None)
    names = list(by_name)
    assert order[:3] == names and order[3:6] == names[1:] + names[:1] and order[6:9] == names[2:] + names[:2]
    rows = timing.rows_of(rungs, "eager", "cpu", ("t", "tr"))
    assert [float(r["median_us"]) for r in rows] == [2.5e6, 2e6, 4e6]
    assert [float(r["ratio"]) for r in rows] == [1.0, 0.8, 1.6]
    assert {r["aa_ratio"] for r in rows} == {"0.8000"}
    assert timing.aa_spread(rows) == pytest.approx(0.2)


def test_a_ratio_is_a_difference_only_beyond_the_a_a_spread():
    assert timing.verdict(1.05, 0.06) == "within A/A" and timing.verdict(0.95, 0.06) == "within A/A"
    assert timing.verdict(1.07, 0.06) == "slower" and timing.verdict(0.90, 0.06) == "faster"
    assert timing.verdict(2.0, float("nan")) == "no A/A"


def row(mode, group, rung, us, launch="-", engine="-", aa="nan", ratio="1.0"):
    return dict(zip(timing.FIELDS, [mode, "dev", "t", "tr", group, rung, launch, engine, 1024, 3, 10, str(us), str(us),
                                    str(us), ratio, aa, "nan"]))


def test_the_summary_splits_the_gap_into_python_and_the_handoff():
    group = "forward + backward, 2**24"
    rows = [row("handoff", group, "F.gelu", 80, engine="device thread"),
            row("handoff", group, "F.gelu" + timing.AA_SUFFIX, 84, engine="device thread", aa="1.05"),
            row("handoff", group, "F.gelu", 80, engine="one thread"),
            row("handoff", group, "TritonGELU", 180, "lean", "device thread"),
            row("handoff", group, "TritonGELU", 90, "lean", "one thread")]
    text = call_cost.summary(rows, "abc1234", failed=[])
    line = next(line for line in text.splitlines() if line.startswith("| 2**24 | lean"))
    assert "100.0 us" in line and "10.0 us" in line and "90%" in line  # (100 - 10) / 100
    assert "A/A spread: 5.0%" in text and "tree abc1234" in text


def test_the_summary_gives_the_mlp_step_ratio_in_each_mode_with_its_claim():
    group = "MLP step (64 x 256), graphed"
    rows = [row("graphed", group, "nn.GELU, graph replay", 80),
            row("graphed", group, "nn.GELU, graph replay" + timing.AA_SUFFIX, 82, aa="1.025"),
            row("graphed", group, "TritonGELU, graph replay", 81, launch="ordinary"),
            row("eager", "MLP step (64 x 256)", "nn.GELU", 600),
            row("eager", "MLP step (64 x 256)", "TritonGELU", 900, launch="ordinary")]
    lines = call_cost.summary(rows, "abc1234", failed=["compiled"]).splitlines()
    replay = next(line for line in lines if line.startswith("| graphed | graph replay"))
    assert "1.012x" in replay and "within A/A" in replay
    eager = next(line for line in lines if line.startswith("| eager | eager, ordinary launch"))
    assert "1.500x" in eager and "slower" in eager
    assert any("compiled" in line and "failed" in line for line in lines)


# --- the dry run: every mode, in a process of its own, and only the files it wrote ---------

@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("call_cost")
    committed = {p: p.read_bytes() for p in (REPO / "benchmarks/results").glob("call_cost_*")}
    result = run("call_cost.py", "--dry-run", "--out", str(out))
    assert {p: p.read_bytes() for p in (REPO / "benchmarks/results").glob("call_cost_*")} == committed
    return result, out


def test_a_dry_run_names_exactly_the_files_it_wrote(dry_run):
    result, out = dry_run
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    named = [Path(p) for p in re.search(r"^wrote (.*)$", result.stdout, re.MULTILINE).group(1).split(", ")]
    assert sorted(named) == sorted(out.iterdir())
    assert {p.name for p in named} == {f"call_cost_dry-run_{m}.log" for m in call_cost.MODES} | \
        {"call_cost_dry-run.csv", "call_cost_dry-run.md"}
    assert ".png" not in result.stdout


def test_every_log_begins_with_the_tree_and_each_mode_ran_in_its_own_process(dry_run):
    result, out = dry_run
    for mode in call_cost.MODES:
        text = (out / f"call_cost_dry-run_{mode}.log").read_text()
        assert text.startswith("tree ") and f"call_cost_{mode}.py" in text.splitlines()[1]
        assert f"mode {mode}:" in text and text.rstrip().endswith("exit status 0")
    if not ON_GPU:
        assert "nothing timed: it needs a CUDA GPU" in (out / "call_cost_dry-run_graphed.log").read_text()
    else:  # the GPU-only rungs: the captured graphs, compile with and without CUDA graphs
        text = (out / "call_cost_dry-run.md").read_text()
        for rung in ("TritonGELU, graph replay", "make_graphed_callables", "torch.compile reduce-overhead",
                     "torch.compile default", "graph replay, op alone"):
            assert rung in text, rung


def test_every_group_of_the_dry_run_has_its_a_a_copy(dry_run):
    _, out = dry_run
    with open(out / "call_cost_dry-run.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["mode"] for r in rows} >= {"eager", "compiled", "handoff"}
    for group in {(r["mode"], r["group"]) for r in rows}:
        names = [r["rung"] for r in rows if (r["mode"], r["group"]) == group]
        assert names[1] == names[0] + timing.AA_SUFFIX, group
    assert all(float(r["median_us"]) > 0 and r["rounds"] == "3" for r in rows)
    fb = {(r["rung"], r["launch"]) for r in rows if r["mode"] == "eager" and r["group"] == "forward + backward, 2**4"}
    assert {("TritonGELU", "ordinary"), ("TritonGELU", "lean"), ("define/impl ops inside a Function", "ordinary"),
            ("the book's TritonGELU (04)", "ordinary")} <= fb
    engines = {(r["rung"], r["launch"], r["engine"]) for r in rows if r["mode"] == "handoff"}
    assert {("TritonGELU", "lean", "one thread"), ("TritonGELU", "lean", "device thread"),
            ("F.gelu", "-", "one thread"), ("F.gelu (CPU)", "-", "threads off")} <= engines
    text = (out / "call_cost_dry-run.md").read_text()
    assert "The run's A/A spread" in text and "## The engine's handoff" in text
