"""
What a call costs: the timing every mode shares
===============================================

Each mode of benchmarks/call_cost.py (eager, compiled, graphed, handoff) runs in a process of
its own and times its rungs here, the same way:

  a group      rungs that are compared with one another: the same size, the same kind of work.
               Its first rung is the reference; its second is the same reference built and
               timed again as a rung of its own, the A/A control.
  a loop       N calls, then one torch.cuda.synchronize(); seconds per call. N is chosen so a
               loop lasts about --target-ms.
  a round      one loop of every rung of the group, in an order that rotates from round to
               round, so that drift on a shared machine weighs on every rung alike.
  the figure   the median over the rounds; q1 and q3 beside it.
  the ratio    a rung's median over the reference's median.
  the A/A      the copy's median over the reference's: identical code, so any distance from 1
               is noise. The run's A/A spread is the largest such distance over every group of
               every mode, and a ratio is called a difference only where it lies further from 1.

It also says which tree was measured (git describe, and a hash of any uncommitted change), and
reads and writes the rows every mode hands to the driver.
"""
import argparse
import contextlib
import csv
import hashlib
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
FIELDS = ["mode", "device", "torch", "triton", "group", "rung", "launch", "engine", "n", "rounds", "calls",
          "median_us", "q1_us", "q3_us", "ratio", "aa_ratio", "do_bench_us"]
AA_SUFFIX = " (A/A copy)"


MEASURED = ["benchmarks/call_cost.py", "benchmarks/call_cost_timing.py", "benchmarks/call_cost_eager.py",
            "benchmarks/call_cost_compiled.py", "benchmarks/call_cost_graphed.py", "benchmarks/call_cost_handoff.py",
            "hardened_ops.py", "extras/train_mlp.py", "extras/triton_op.py", "04_standalone_complete.py"]


def tree():
    """The tree measured: `git describe --always --dirty`. Where it is dirty: a hash of the uncommitted
    diff, the paths it touches, and the git blob id of each file this benchmark runs, which a commit's
    `git ls-tree` can be matched against (new files are in no diff)."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout
    try:
        described = git("describe", "--always", "--dirty").strip()
        if not described.endswith("-dirty"):
            return described
        diff = git("diff", "HEAD")
        paths = " ".join(git("diff", "HEAD", "--name-only").split())
        blobs = " ".join(f"{path}={git('hash-object', path).strip()[:12]}" for path in MEASURED
                         if (REPO / path).exists())
        return (f"{described} (uncommitted diff sha256 {hashlib.sha256(diff.encode()).hexdigest()[:16]}, in {paths}; "
                f"the files measured, as git blob ids: {blobs})")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


@dataclass
class Rung:
    group: str
    name: str
    call: Callable[[], object]
    launch: str = "-"  # ordinary, lean, or - where the op launches no Triton kernel
    engine: str = "-"  # the autograd engine's threads: "device thread", "one thread", or -
    n: int = 0
    context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext  # around every loop
    calls: int = 0
    seconds: list = field(default_factory=list)  # per call, one a round
    do_bench_s: float = float("nan")


def loop(rung, calls, synchronize):
    """Seconds a call: `calls` calls, one synchronize."""
    with rung.context():
        started = time.perf_counter()
        for _ in range(calls):
            rung.call()
        synchronize()
        return (time.perf_counter() - started) / calls


def calibrate(rung, target_s, synchronize, fixed_calls=None, most=20000):
    """Warms the rung up (compiles, caches, records), then picks the calls a loop for target_s."""
    loop(rung, 3, synchronize)
    if fixed_calls:
        return fixed_calls
    once = loop(rung, 5, synchronize)
    return max(5, min(most, int(target_s / max(once, 1e-8))))


def time_group(rungs, rounds, target_s, synchronize, fixed_calls=None, report=print):
    """Times one group in interleaved rounds; fills each rung's calls and seconds."""
    for rung in rungs:
        rung.calls = calibrate(rung, target_s, synchronize, fixed_calls)
    for round_ in range(rounds):
        shift = round_ % len(rungs)
        for rung in rungs[shift:] + rungs[:shift]:
            rung.seconds.append(loop(rung, rung.calls, synchronize))
    for row in rows_of(rungs, mode="", device="", versions=("", "")):
        report(describe(row))


def quartiles(values):
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def rows_of(rungs, mode, device, versions):
    """One row a rung: its median and quartiles, its ratio to the group's reference (the first rung),
    and the group's A/A (the copy's median over the reference's), where the group has a copy."""
    reference = statistics.median(rungs[0].seconds)
    copies = [r for r in rungs if r.name == rungs[0].name + AA_SUFFIX]
    aa = statistics.median(copies[0].seconds) / reference if copies else float("nan")
    rows = []
    for rung in rungs:
        q1, median, q3 = quartiles(rung.seconds)
        rows.append(dict(zip(FIELDS, [mode, device, *versions, rung.group, rung.name, rung.launch, rung.engine,
                                      rung.n, len(rung.seconds), rung.calls, f"{median * 1e6:.3f}",
                                      f"{q1 * 1e6:.3f}", f"{q3 * 1e6:.3f}", f"{median / reference:.4f}",
                                      f"{aa:.4f}", f"{rung.do_bench_s * 1e6:.3f}"])))
    return rows


def describe(row):
    tags = ", ".join(v for v in (row["launch"], row["engine"]) if v != "-")
    name = row["rung"] + (f" [{tags}]" if tags else "")
    return (f"{row['group']:<34} {name:<60} {float(row['median_us']):>10.2f} us "
            f"(q1 {float(row['q1_us']):.2f}, q3 {float(row['q3_us']):.2f}) {float(row['ratio']):>6.3f}x, "
            f"A/A {float(row['aa_ratio']):.3f}")


def write_rows(path, rows):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)


def read_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def aa_spread(rows):
    """The run's A/A spread: the largest distance from 1 of any group's A/A ratio (nan where none)."""
    spreads = [abs(float(r["aa_ratio"]) - 1) for r in rows if r["aa_ratio"] != "nan"]
    return max(spreads) if spreads else float("nan")


def verdict(ratio, spread):
    """'slower' or 'faster' where the ratio lies further from 1 than the A/A spread, else 'within A/A'
    ('no A/A' where the run had no A/A control at all: then nothing is claimed)."""
    if spread != spread:
        return "no A/A"
    if abs(ratio - 1) <= spread:
        return "within A/A"
    return "slower" if ratio > 1 else "faster"


# ---------------------------------------------------------------------------
# A mode's process: its arguments, its header, its groups timed, its rows written
# ---------------------------------------------------------------------------

def parse_mode_args(mode, description, argv=None):
    parser = argparse.ArgumentParser(prog=f"call_cost_{mode}.py", description=description)
    parser.add_argument("--rows", type=Path, default=None, help="CSV file for the rows (default: print only)")
    parser.add_argument("--rounds", type=int, default=30, help="interleaved rounds a group (default 30)")
    parser.add_argument("--target-ms", type=float, default=10.0, help="milliseconds a loop (default 10)")
    parser.add_argument("--log2", default="10,24", help="sizes, as powers of two (default 10,24)")
    parser.add_argument("--dry-run", action="store_true",
                        help="2**4 and 2**6 elements, 3 rounds of 2 calls: runs anywhere, the Triton interpreter too")
    args = parser.parse_args(argv)
    try:
        args.sizes = [2 ** int(v) for v in args.log2.split(",")]
        if min(args.sizes) < 1:
            raise ValueError
    except ValueError:
        parser.error(f"--log2 takes comma-separated whole numbers, 0 or more, not {args.log2!r}")
    if args.rows is not None and (args.rows.is_dir() or any(p.exists() and not p.is_dir() for p in args.rows.parents)):
        where = "a folder" if args.rows.is_dir() else "under a file"
        parser.error(f"--rows {args.rows}: a CSV file's name, in a folder (this is {where})")
    if args.rounds < 1 or args.target_ms <= 0:
        parser.error("--rounds must be at least 1 and --target-ms above 0")
    if args.dry_run:
        args.sizes, args.rounds = [2**4, 2**6], 3
    return args


def run_mode(mode, description, build, argv=None, gpu_only=False, with_do_bench=False):
    """Parses the mode's arguments, then times each group that build(ops, torch, args) yields. Exits 2
    without a GPU unless --dry-run; a gpu_only mode's dry run without a GPU times nothing and says so."""
    args = parse_mode_args(mode, description, argv)
    sys.path.insert(0, str(REPO))
    # The rungs labelled "ordinary" must time the ordinary launch even where the reader has set
    # HARDENED_OPS_LEAN_LAUNCH=1: the lean rungs ask for the lean one with launch_path(lean=True).
    os.environ.pop("HARDENED_OPS_LEAN_LAUNCH", None)
    import hardened_ops as ops  # picks the backend: CUDA, or the Triton interpreter
    import torch
    import triton
    on_gpu = ops.DEVICE.type == "cuda"
    if not on_gpu and not args.dry_run:
        print(f"call_cost_{mode}.py needs a CUDA GPU: what it measures is the CPU time of GPU launches. "
              "--dry-run runs a tiny version anywhere.", file=sys.stderr)
        return 2
    device = torch.cuda.get_device_name() if on_gpu else "CPU, Triton interpreter"
    versions = (torch.__version__, triton.__version__)
    lean = "available" if ops.LEAN_LAUNCH_AVAILABLE else f"not available ({ops.LEAN_LAUNCH_OFF_BECAUSE})"
    print(f"tree {tree()}")
    print(f"mode {mode}: {device}, torch {versions[0]}, triton {versions[1]}; lean launch {lean}; "
          f"{args.rounds} rounds, loops of about {args.target_ms} ms" + (" (dry run)" if args.dry_run else ""),
          flush=True)
    rows = []
    if gpu_only and not on_gpu:
        print(f"{mode}: nothing timed: it needs a CUDA GPU")
    else:
        def synchronize():
            if on_gpu:
                torch.cuda.synchronize()
        for rungs in build(ops, torch, args):
            if with_do_bench and on_gpu and not args.dry_run:
                from triton.testing import do_bench
                for rung in rungs:
                    with rung.context():
                        rung.do_bench_s = do_bench(rung.call, warmup=10, rep=40, return_mode="median") * 1e-3
            time_group(rungs, args.rounds, args.target_ms * 1e-3, synchronize,
                       fixed_calls=2 if args.dry_run else None, report=lambda line: print(line, flush=True))
            rows += rows_of(rungs, mode, device, versions)
    if args.rows:
        write_rows(args.rows, rows)
    return 0
