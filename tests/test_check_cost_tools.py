"""The cost benchmark's A/B tools: check_cost.py --checker times another tree's checker and says so, and
compare_check_cost.py sets four runs side by side, counting a difference only beyond the runs' own A/A. And the
benchmarks refuse arguments they cannot honour, with one line, before any work."""
import os
import re
import shutil
import subprocess
import sys

from chapter_scripts import REPO

BENCHMARKS = REPO / "benchmarks"


def run(script, *args, cwd=REPO):
    return subprocess.run([sys.executable, str(BENCHMARKS / script), *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=600)


def cost_log(path, seconds):
    """A check_cost.py log with one kind at two sizes: {(elements, mode): seconds}."""
    lines = ["tree: test; checker hash 000000000000 (tools/stamp.py: sha256 of the checker's files)"]
    for elements in sorted({e for e, _ in seconds}):
        lines += ["", f"softplus (elementwise), {elements:,} elements in (1, {elements}): op forward+backward 0.100 ms "
                      f"(best of 10)"]
        for (e, mode), took in seconds.items():
            if e == elements:
                lines.append(f"  {mode:<6} {took:8.3f} s  {took / 1e-4:10,.0f}x the op   37 forwards, 33 backwards of "
                             f"the op (35 op steps' worth)  clean")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_two_checkers_compared_count_a_difference_only_beyond_their_own_spread(tmp_path):
    # B twice as slow at 10^5 in both rounds, each checker within 5% of itself; at 10^3 B / A is 1.1 and 0.9
    b1 = cost_log(tmp_path / "b1.log", {(100_000, "ref"): 2.0, (1000, "ref"): 0.11})
    a1 = cost_log(tmp_path / "a1.log", {(100_000, "ref"): 1.0, (1000, "ref"): 0.10})
    b2 = cost_log(tmp_path / "b2.log", {(100_000, "ref"): 2.1, (1000, "ref"): 0.09})
    a2 = cost_log(tmp_path / "a2.log", {(100_000, "ref"): 1.05, (1000, "ref"): 0.10})
    done = run("compare_check_cost.py", b1, a1, b2, a2, "--out", tmp_path / "out.log")
    assert done.returncode == 0, done.stderr
    assert "1e+05: B / A median 2.00; A/A spread 0.05; A faster beyond it in 1 of 1 rows" in done.stdout, done.stdout
    assert "1e+03: B / A median 1.00; A/A spread 0.18; A faster beyond it in 0 of 1 rows, slower in 0" in done.stdout
    assert (tmp_path / "out.log").read_text().strip() == done.stdout.strip()


def test_a_log_that_is_not_the_benchmarks_is_refused_with_a_message(tmp_path):
    (tmp_path / "empty.log").write_text("nothing here\n")
    done = run("compare_check_cost.py", *(tmp_path / "empty.log",) * 3, tmp_path / "missing.log")
    assert done.returncode == 2 and "compare_check_cost.py:" in done.stderr and "Traceback" not in done.stderr


def test_logs_that_cannot_be_compared_are_refused_with_a_message(tmp_path):
    """Four logs of other sizes, of two devices, or a bundle of several runs: exit 2, one line, no ratios."""
    same = {(1000, "ref"): 0.1, (100_000, "ref"): 1.0}
    b1, a1, b2 = (cost_log(tmp_path / f"{name}.log", same) for name in ("b1", "a1", "b2"))
    fewer = cost_log(tmp_path / "fewer.log", {(1000, "ref"): 0.1})
    twice = tmp_path / "twice.log"
    twice.write_text(b1.read_text() + b1.read_text())
    on = {}
    for device in ("cpu (CPU x86_64)", "cuda (NVIDIA H100 80GB HBM3)"):
        on[device] = tmp_path / f"{device[:4]}.log"
        on[device].write_text(b1.read_text() + f"summary on {device}: check seconds / the op's forward+backward\n")
    cpu, cuda = on.values()
    for logs, words in (((b1, a1, b2, fewer), "not of the same sizes, kinds and modes"),
                        ((b1, a1, b2, twice), "holds more than one run"),
                        ((cpu, cuda, cpu, cuda), "different devices"),
                        ((b1, a1, b2, b1, "--out", tmp_path), "Is a directory")):
        done = run("compare_check_cost.py", *logs)
        assert done.returncode == 2 and words in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and "B / A median" not in done.stdout
    assert run("compare_check_cost.py", cpu, cpu, cpu, cpu).returncode == 0
    assert run("compare_check_cost.py", cpu, b1, cpu, b1).returncode == 0  # a run cut short: no summary line


def test_check_cost_refuses_bad_arguments_before_any_work(tmp_path):
    """A size below one element, no timings of the op, a device it cannot time, an --out it cannot write: exit 2
    with one line, before any check (no ratio printed, no log written)."""
    for args, words in ((("--sizes", "0"), "1 or more, not 0"), (("--sizes", "1e3", "--repeat", "0"), "--repeat"),
                        (("--device", "meta"), "the CPU or a CUDA GPU"), (("--out", tmp_path), "Is a directory")):
        done = run("check_cost.py", *args)
        assert done.returncode == 2 and words in done.stderr, done.stderr[-2000:]
        assert "Traceback" not in done.stderr and "x the op" not in done.stdout


def test_check_cost_times_another_trees_checker_and_says_so(tmp_path):
    done = run("check_cost.py", "--checker", tmp_path, "--sizes", "1e3", "--kinds", "mse", "--no-plugin")
    assert done.returncode == 2 and "no backward-check/backward_check/ in it" in done.stderr, done.stderr
    shutil.copytree(REPO / "backward-check", tmp_path / "backward-check",
                    ignore=shutil.ignore_patterns("__pycache__", "tests", "examples"))
    log = tmp_path / "run.log"
    done = run("check_cost.py", "--checker", tmp_path, "--sizes", "1e3", "--kinds", "mse", "--no-fd", "--no-plugin",
               "--no-breakdown", "--device", "cpu", "--repeat", "2", "--out", log)
    assert done.returncode == 0, done.stderr[-2000:]
    text = log.read_text()
    assert f"the checker timed is not this tree's but the one in {tmp_path.name}/ (--checker)" in text, text[:600]
    assert "  ref " in text and "clean" in text


def test_the_plugins_worker_runs_the_other_trees_checker_too(tmp_path):
    """The worker is a spawned process that runs check_cost.py again as its main module: under --checker it must
    import that tree's checker, as the process that timed the other modes did, not this tree's. The other tree's
    checker here words a clean verdict its own way, so the plugin's row shows whose checker answered."""
    copy = tmp_path / "backward-check"
    shutil.copytree(REPO / "backward-check", copy, ignore=shutil.ignore_patterns("__pycache__", "tests", "examples"))
    child = copy / "backward_check" / "plugin" / "child.py"
    source = child.read_text()
    assert 'Verdict(CLEAN, "clean", ' in source
    child.write_text(source.replace('Verdict(CLEAN, "clean", ', 'Verdict(CLEAN, "clean, by the other tree", '))
    log = tmp_path / "run.log"
    done = run("check_cost.py", "--checker", tmp_path, "--sizes", "1e3", "--kinds", "mse", "--no-fd",
               "--no-breakdown", "--device", "cpu", "--repeat", "2", "--out", log)
    assert done.returncode == 0, done.stderr[-2000:]
    plugin_rows = [line for line in log.read_text().splitlines() if line.startswith("  plugin ")]
    assert len(plugin_rows) == 1 and plugin_rows[0].endswith("clean, by the other tree"), plugin_rows


def test_the_other_checker_named_in_the_environment_is_the_one_the_header_names(tmp_path):
    """The variable that hands --checker to the worker, set by hand without --checker: the checker imported and the
    one the log's header names are the same (the other tree's)."""
    shutil.copytree(REPO / "backward-check", tmp_path / "backward-check",
                    ignore=shutil.ignore_patterns("__pycache__", "tests", "examples"))
    log = tmp_path / "run.log"
    done = subprocess.run([sys.executable, str(BENCHMARKS / "check_cost.py"), "--sizes", "1e3", "--kinds", "mse",
                           "--no-fd", "--no-plugin", "--no-breakdown", "--device", "cpu", "--repeat", "2", "--out", log],
                          capture_output=True, text=True, cwd=REPO, timeout=600,
                          env={**os.environ, "CHECK_COST_OTHER_CHECKER": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"the checker timed is not this tree's but the one in {tmp_path.name}/ (--checker)" in log.read_text()


def test_the_kernel_benchmarks_refuse_a_script_or_block_they_cannot_time(tmp_path):
    """gelu_bandwidth.py and large_tensor.py load the kernels of the script named: a file that is not Python, or
    a block that is no power of two (tl.arange refuses one; the interpreter returned wrong numbers at -3), exit 2
    with one line, before the GPU is asked for."""
    for script, args, words in (("gelu_bandwidth.py", ("--block", "1000"), "a power of two"),
                                ("gelu_bandwidth.py", ("--script", REPO / "README.md"), "not a .py file"),
                                ("large_tensor.py", ("--script", tmp_path / "absent.py"), "no such file")):
        done = run(script, *args)
        assert done.returncode == 2 and words in done.stderr, done.stderr[-2000:]
        assert "Traceback" not in done.stderr


def research_log(script, tmp_path, *args):
    """research/SCRIPT run with args and --out, which must exit 0: its log, stamped with the tree and the checker."""
    out = tmp_path / f"{script}.log"
    done = subprocess.run([sys.executable, str(REPO / "research" / script), *map(str, args), "--out", out],
                          capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr
    log = out.read_text()
    assert log.startswith("tree: ") and "\nchecker: " in log
    return log


def refuses_each(script, bad_arguments):
    """research/SCRIPT refuses each of bad_arguments with exit 2, its usage and one line of error, no traceback."""
    for bad in bad_arguments:
        refused = subprocess.run([sys.executable, str(REPO / "research" / script), *map(str, bad)],
                                 capture_output=True, text=True, cwd=REPO, timeout=120)
        assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 2, refused.stderr  # usage, and one line of error


def test_call_repeats_counts_what_sharing_could_save_and_refuses_bad_arguments(tmp_path):
    # research/check_call_repeats.py: every call of the op filed and keyed; with a reference most forwards repeat
    # one (the checks differ in the grad_output they hand the backward), a few backwards do (the same call twice),
    # and the whole check runs, "what backward returns" among its checks
    log = research_log("check_call_repeats.py", tmp_path, "--kinds", "mse", "--sizes", "1e3")
    lines = log.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("mse") and " ref " in line)
    ref, by_check = lines[at], lines[at + 1]
    forwards, again_f, backwards, again_b = map(int, re.search(
        r"forwards +(\d+) \( *(\d+) repeats\) +backwards +(\d+) \( *(\d+) repeats\)", ref).groups())
    assert forwards / 2 < again_f < forwards and 0 < again_b < backwards / 2, ref
    assert ref.endswith("clean") and "what backward returns" in by_check and "the same call twice" in by_check, by_check
    _, repeats = map(float, re.search(r"op +([\d.]+) steps' worth, the repeats +([\d.]+)", ref).groups())
    assert 0 < repeats, ref
    refuses_each("check_call_repeats.py", (["--sizes", "0"], ["--sizes", "nan"], ["--kinds", "nothing"],
                                           ["--device", "gpu"], ["--out", tmp_path / "missing" / "r.log"],
                                           ["--out", tmp_path]))


def test_fd_census_counts_the_given_and_the_grown_inputs_calls_and_refuses_bad_arguments(tmp_path):
    # research/fd_call_census.py: softplus at 10^3 elements is differenced along directions on its 1,000 elements and
    # by sampled columns on the same grown past several blocks, each call of the op counted once, and the check clean
    log = research_log("fd_call_census.py", tmp_path, "--kinds", "softplus", "--sizes", "1e3")
    total = int(re.search(r"softplus at 1e\+03: (\d+) calls of the op in finite differences, clean", log).group(1))
    given = int(re.search(r"inputs of 1,000 elements \(directions\): (\d+) calls", log).group(1))
    grown = re.search(r"inputs of ([\d,]+) elements \(sampled columns\): (\d+) calls", log)
    assert grown and int(grown.group(1).replace(",", "")) > 2048, log  # grown past two 1024-element blocks
    assert given > 0 and int(grown.group(2)) > 0 and given + int(grown.group(2)) == total, log
    refuses_each("fd_call_census.py", (["--sizes", "0"], ["--sizes", "nan"], ["--kinds", "nothing"],
                                        ["--out", tmp_path / "missing" / "c.log"], ["--out", tmp_path]))
