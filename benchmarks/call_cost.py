"""
What a call costs: every mode in a process of its own, against an A/A control
=============================================================================

The bandwidth benchmark times kernels with triton.testing.do_bench, which flushes the L2 cache
before every call, so the CPU's time of a call is hidden. A model does not flush between its
ops. This times whole calls in a steady loop, in four modes, each in a process of its own so
that a compile or a capture cannot move another mode's figures:

  eager     benchmarks/call_cost_eager.py: from a bare launch to a registered op, forward and
            forward + backward, ordinary and lean launch; the MLP step
  compiled  benchmarks/call_cost_compiled.py: the MLP step under torch.compile, default and
            reduce-overhead
  graphed   benchmarks/call_cost_graphed.py: forward, loss and backward captured in one CUDA
            graph and replayed, the op alone and the MLP step; make_graphed_callables beside it
  handoff   benchmarks/call_cost_handoff.py: one engine thread against the device thread, and
            the same loop on the CPU with no GPU work

Every group of rungs holds an A/A control (its reference, timed again as a rung of its own) and
is timed in interleaved rounds; a figure is the median over the rounds
(benchmarks/call_cost_timing.py says how). The run's A/A spread is the largest distance of any
A/A ratio from 1, and the summary calls a ratio a difference only where it lies further out.

    python benchmarks/call_cost.py                  # on a CUDA GPU: a log a mode, CSV and Markdown
    python benchmarks/call_cost.py --modes handoff  # one mode, or a comma-separated few
    python benchmarks/call_cost.py --dry-run        # anywhere: tiny sizes, a temporary folder

It writes call_cost_LABEL_MODE.log (each begins with the tree measured), call_cost_LABEL.csv
and call_cost_LABEL.md, and names only the files it wrote. Without a GPU (and without
--dry-run) it exits 2; where a mode fails, the others still run, and it exits 1.
"""
import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from call_cost_timing import AA_SUFFIX, REPO, aa_spread, read_rows, tree, verdict, write_rows

HERE = Path(__file__).resolve().parent
MODES = ("eager", "compiled", "graphed", "handoff")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)} (default all)")
    parser.add_argument("--rounds", type=int, default=30, help="interleaved rounds a group (default 30)")
    parser.add_argument("--target-ms", type=float, default=10.0, help="milliseconds a loop (default 10)")
    parser.add_argument("--log2", default="10,24", help="sizes, as powers of two (default 10,24)")
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes, 3 rounds of 2 calls: runs anywhere")
    parser.add_argument("--label", default=None, help="names the files (default gpu; dry-run for --dry-run)")
    parser.add_argument("--out", type=Path, default=None, help="folder for the files (default benchmarks/results)")
    args = parser.parse_args(argv)
    args.modes = args.modes.split(",")
    unknown = [m for m in args.modes if m not in MODES]
    if unknown:
        parser.error(f"unknown mode(s) {unknown}: choose from {', '.join(MODES)}")
    try:
        if min(int(v) for v in args.log2.split(",")) < 0:
            raise ValueError
    except ValueError:
        parser.error(f"--log2 takes comma-separated whole numbers, 0 or more, not {args.log2!r}")
    if args.rounds < 1 or args.target_ms <= 0:
        parser.error("--rounds must be at least 1 and --target-ms above 0")
    if args.dry_run:
        args.label = args.label or "dry-run"
        args.out = args.out or Path(tempfile.mkdtemp(prefix="call_cost_dry_run_"))
    args.label = args.label or "gpu"
    args.out = args.out or REPO / "benchmarks" / "results"
    if not args.label or Path(args.label).name != args.label:
        parser.error(f"--label {args.label!r}: a name for the files, without a folder in it (--out is the folder)")
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"--out {args.out}: a file, not a folder")
    return args


def gpu_visible():
    """What hardened_ops.py will pick: CUDA unless the interpreter is asked for or no GPU is seen."""
    if os.environ.get("TRITON_INTERPRET", "").lower() in ("1", "true", "yes", "y", "on"):
        return False
    import torch
    return torch.cuda.is_available()


def run_mode(mode, args, rows_path, log_path, described):
    """Runs one mode's script in a process of its own; its output goes to the screen and to its log."""
    command = [sys.executable, str(HERE / f"call_cost_{mode}.py"), "--rows", str(rows_path),
               "--rounds", str(args.rounds), "--target-ms", str(args.target_ms), "--log2", args.log2]
    command += ["--dry-run"] if args.dry_run else []
    with open(log_path, "w") as log:
        log.write(f"tree {described}\n$ python benchmarks/call_cost_{mode}.py {' '.join(command[2:])}\n")
        log.flush()
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   cwd=HERE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        for line in process.stdout:
            sys.stdout.write(line)
            log.write(line)
        returncode = process.wait()
        log.write(f"exit status {returncode}\n")
    return returncode


# ---------------------------------------------------------------------------
# The summary: every row beside its A/A, then what the modes say together
# ---------------------------------------------------------------------------

def find(rows, mode, group_start, rung, launch=None, engine=None):
    for row in rows:
        if (row["mode"] == mode and row["group"].startswith(group_start) and row["rung"] == rung
                and (launch is None or row["launch"] == launch) and (engine is None or row["engine"] == engine)):
            return row
    return None


def us(row):
    return float(row["median_us"])


def tables(rows, spread):
    lines = []
    for mode in dict.fromkeys(r["mode"] for r in rows):
        lines += ["", f"### {mode}", "", "| group | rung | launch | engine | median us (q1, q3) | ratio | group's A/A | "
                  "against the run's A/A spread |", "|---|---|---|---|---|---|---|---|"]
        seen = set()
        for r in (r for r in rows if r["mode"] == mode):
            ratio, first = float(r["ratio"]), r["group"] not in seen
            seen.add(r["group"])
            lines.append(f"| {r['group']} | {r['rung']} | {r['launch']} | {r['engine']} | {us(r):.1f} "
                         f"({float(r['q1_us']):.1f}, {float(r['q3_us']):.1f}) | {ratio:.3f}x | "
                         f"{float(r['aa_ratio']):.3f} | "
                         f"{'reference' if first else verdict(ratio, spread)} |")
    return lines


def mlp_summary(rows, spread):
    """The MLP step in every mode: TritonGELU over nn.GELU within each mode's process."""
    cases = [("eager", "MLP step", "nn.GELU", "TritonGELU", "ordinary"),
             ("eager", "MLP step", "nn.GELU", "TritonGELU", "lean"),
             ("graphed", "MLP step", "nn.GELU, graph replay", "TritonGELU, graph replay", None),
             ("graphed", "MLP step", "nn.GELU, make_graphed_callables (loss, copies, engine eager)",
              "TritonGELU, make_graphed_callables (loss, copies, engine eager)", None),
             ("compiled", "MLP step", "nn.GELU, torch.compile default", "TritonGELU, torch.compile default", None),
             ("compiled", "MLP step", "nn.GELU, torch.compile reduce-overhead",
              "TritonGELU, torch.compile reduce-overhead", None)]
    lines = ["", "## The MLP step in each mode", "", "| mode | how | nn.GELU us | TritonGELU us | TritonGELU / nn.GELU | "
             "group's A/A | claim |", "|---|---|---|---|---|---|---|"]
    found = False
    for mode, group, reference, other, launch in cases:
        base, row = find(rows, mode, group, reference), find(rows, mode, group, other, launch)
        if base is None or row is None:
            continue
        found = True
        ratio = us(row) / us(base)
        how = reference.split(", ", 1)[1] if ", " in reference else f"eager, {launch} launch"
        lines.append(f"| {mode} | {how} | {us(base):.1f} | {us(row):.1f} | {ratio:.3f}x | {float(row['aa_ratio']):.3f} "
                     f"| {verdict(ratio, spread)} |")
    return lines if found else []


def handoff_summary(rows):
    """At each size: the gap TritonGELU - F.gelu on the device thread and on one thread; the handoff's
    share of the device-thread gap is what one thread takes away from it."""
    lines = ["", "## The engine's handoff", "", "| size | launch | F.gelu us, device / one thread | TritonGELU us, "
             "device / one thread | gap on the device thread | gap on one thread (Python) | the handoff's share of "
             "the gap |", "|---|---|---|---|---|---|---|"]
    found = False
    for group in dict.fromkeys(r["group"] for r in rows if r["mode"] == "handoff" and "GPU" not in r["group"]):
        f_device = find(rows, "handoff", group, "F.gelu", engine="device thread")
        f_one = find(rows, "handoff", group, "F.gelu", engine="one thread")
        for launch in ("ordinary", "lean"):
            t_device = find(rows, "handoff", group, "TritonGELU", launch, "device thread")
            t_one = find(rows, "handoff", group, "TritonGELU", launch, "one thread")
            if None in (f_device, f_one, t_device, t_one):
                continue
            found = True
            gap_device, gap_one = us(t_device) - us(f_device), us(t_one) - us(f_one)
            share = (gap_device - gap_one) / gap_device if gap_device > 0 else float("nan")
            lines.append(f"| {group.split(', ')[-1]} | {launch} | {us(f_device):.1f} / {us(f_one):.1f} | "
                         f"{us(t_device):.1f} / {us(t_one):.1f} | {gap_device:.1f} us | {gap_one:.1f} us | "
                         f"{share * 100:.0f}% |")
    return lines if found else []


def summary(rows, described, failed):
    spread = aa_spread(rows)
    groups = [(r["mode"], r["group"], float(r["aa_ratio"])) for r in rows if r["rung"].endswith(AA_SUFFIX)]
    lines = [f"# What a call costs: tree {described}", ""]
    if rows:
        lines.append(f"{rows[0]['device']}, torch {rows[0]['torch']}, triton {rows[0]['triton']}; medians over "
                     f"{rows[0]['rounds']} interleaved rounds, each mode in a process of its own.")
    lines += ["", f"**The run's A/A spread: {spread * 100:.1f}%** (the largest distance from 1 of the A/A ratios: "
              + ", ".join(f"{mode} {group} {aa:.3f}" for mode, group, aa in groups) + "). "
              "A ratio is called faster or slower only where it lies further from 1 than that."]
    if failed:
        lines.append(f"\nModes that failed (see their logs): {', '.join(failed)}.")
    lines += mlp_summary(rows, spread) + handoff_summary(rows)
    lines += ["", "## Every rung"] + tables(rows, spread)
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    if not args.dry_run and not gpu_visible():
        print("call_cost.py needs a CUDA GPU: what it measures is the CPU time of GPU launches. "
              "--dry-run runs a tiny version anywhere.", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    described = tree()
    written, rows, failed = [], [], []
    for mode in args.modes:
        log_path = args.out / f"call_cost_{args.label}_{mode}.log"
        rows_path = Path(tempfile.mkdtemp(prefix="call_cost_rows_")) / f"{mode}.csv"
        returncode = run_mode(mode, args, rows_path, log_path, described)
        written.append(log_path)
        if returncode != 0:
            failed.append(mode)
            print(f"call_cost_{mode}.py exited {returncode}: its rows are left out", file=sys.stderr)
        elif rows_path.exists():
            rows += read_rows(rows_path)
    if rows:
        csv_path, md_path = args.out / f"call_cost_{args.label}.csv", args.out / f"call_cost_{args.label}.md"
        write_rows(csv_path, rows)
        text = summary(rows, described, failed)
        md_path.write_text(text)
        written += [csv_path, md_path]
        print(text)
    print("wrote " + ", ".join(str(p) for p in written))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
