"""
What one check of a large op costs, at this tree against another
================================================================

The pytest plugin's cost on a suite of large ops is mostly its checks. This times one check of a recorded call
as the plugin's worker makes it (worker.check_call: the check, and where it finds a trap in an op that draws
random numbers or runs on a GPU, a second run with the next seed to confirm it), on a large cross entropy written
in torch ops, shaped as Liger-Kernel 0.5.8's is (its forward writes the gradient into the logits; with reduction
'none' its backward reads grad_output's first element alone; and its backward draws one random number, so that
on the CPU too a trap is confirmed as on a GPU), at this tree and at another revision of the repository (a git
worktree of it, made and removed here), in separate processes, each after a warm-up check of its own:

  a round      one check at this tree (A), one at the other (B), and one at this tree again (A'), in an
               order that rotates from round to round, so that drift on a shared machine weighs on all three;
  the ratio    B / A in each round, and its median;
  the A/A      A' / A: the same code, so its distance from 1 is noise. A ratio is called a difference only
               where its median lies further from 1 than the largest A/A distance of the same run;
  the calls    how many times the check called the op (forward and backward): the same in every round, the
               work a check makes whatever the machine's speed.

It also compares the two trees' verdicts: the traps found, and the first run's report word for word and number
for number (its seconds aside). On a CUDA GPU the op runs there (8192 x 32000 bfloat16 logits by default,
Liger's own size); else on the CPU (112 x 32000: past the size where the checker holds its finite-difference
directions).

    python benchmarks/check_seconds.py --against REV [--rows N] [--rounds R] [--log PATH]
    python benchmarks/check_seconds.py --against DIR ...    # a folder holding the other tree's backward-check/,
                                                            # where the repository's history is not at hand

Exit status: 0 done; 2 bad arguments (a revision git does not know, a folder without backward-check/); 1 a check failed to run, or the two trees'
verdicts differ.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REDUCTIONS = ("sum", "none")


def cross_entropy():
    """Liger-Kernel 0.5.8's cross entropy in torch ops: the forward writes the gradient into the logits (and
    saves them), and 'none' scales by grad_output's first element."""
    import torch

    class InPlaceCrossEntropy(torch.autograd.Function):
        calls = 0  # forward and backward calls, all told: the work a check makes, whatever the machine's speed

        @staticmethod
        def forward(ctx, logits, target, reduction):
            InPlaceCrossEntropy.calls += 1
            wide = logits.float()
            loss = torch.logsumexp(wide, -1) - wide.gather(-1, target[:, None])[:, 0]
            gradient = torch.softmax(wide, -1)
            gradient[torch.arange(len(target), device=target.device), target] -= 1
            logits.copy_(gradient.to(logits.dtype))
            ctx.save_for_backward(logits)
            ctx.reduction = reduction
            return (loss if reduction == "none" else loss.sum()).to(logits.dtype)

        @staticmethod
        def backward(ctx, grad_output):
            InPlaceCrossEntropy.calls += 1
            torch.rand(())  # a draw, so that a trap is confirmed on the CPU as on a GPU
            gradient, = ctx.saved_tensors
            scale = grad_output.reshape(-1)[0] if ctx.reduction == "none" else grad_output
            return gradient * scale, None, None

    return InPlaceCrossEntropy


def child(checker, rows, reduction):
    """One warm-up check and one timed check, with the checker found in checker; prints a JSON line."""
    sys.path.insert(0, str(Path(checker) / "backward-check"))
    import torch
    from backward_check import DEVICE
    from backward_check.plugin import worker
    op = cross_entropy()
    generator = torch.Generator().manual_seed(rows)

    def logits_and_target(n):
        logits = torch.randn(n, 32000, generator=generator).to(torch.bfloat16)
        return logits.to(DEVICE), torch.randint(0, 32000, (n,), generator=generator).to(DEVICE)

    def check(n):
        args = (*logits_and_target(n), reduction)
        job = worker.Job("InPlaceCrossEntropy", args, {}, (), (), seed=n)
        start = time.perf_counter()
        verdict = worker.check_call(op, job, args, {})
        if DEVICE.type == "cuda":
            torch.cuda.synchronize()
        return verdict, time.perf_counter() - start

    check(4)  # imports, first calls
    op.calls = 0
    verdict, seconds = check(rows)
    first = verdict.report.split("\n\nseeded with")[0]  # an unstable verdict's second report aside
    print(json.dumps({"seconds": seconds, "calls": op.calls, "device": str(DEVICE),
                      "report": re.sub(r"\(\d+(\.\d+)? s\)", "", first), "verdict": verdict.summary}))


def run_child(checker, rows, reduction):
    done = subprocess.run([sys.executable, __file__, "--child", str(checker), "--rows", str(rows),
                           "--reduction", reduction], capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"the check at {checker} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", help="the other revision (a commit, a tag, HEAD~1), or a folder holding the "
                                          "other tree's backward-check/")
    parser.add_argument("--rows", type=int, help="rows of the logits (default: 8192 on a GPU, 112 on the CPU)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--log", type=Path, help="also write the log here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--reduction", choices=REDUCTIONS, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        child(options.child, options.rows, options.reduction)
        return 0
    if not options.against:
        parser.error("--against REV is required: the revision to compare this tree with")
    if options.rounds < 1 or (options.rows is not None and options.rows < 1):
        parser.error("--rounds and --rows take a whole number, 1 or more")
    folder = Path(options.against)
    if folder.is_dir():
        if not (folder / "backward-check" / "backward_check").is_dir():
            parser.error(f"--against {options.against}: a folder, but without backward-check/backward_check/ in it")
        against = f"the tree in {options.against}"
    else:
        known = subprocess.run(["git", "rev-parse", "--verify", "--quiet", options.against + "^{commit}"], cwd=REPO,
                               capture_output=True, text=True)
        if known.returncode != 0:
            parser.error(f"--against {options.against}: not a revision this repository has, nor a folder")
        against = f"{options.against} ({known.stdout.strip()[:12]})"
    import torch
    on_gpu = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"  # where the checker runs the op
    rows = options.rows or (8192 if on_gpu else 112)
    sys.path.insert(0, str(REPO / "tools"))
    import stamp
    lines = [*stamp.lines(), f"python {sys.version.split()[0]}, torch {torch.__version__}, "
             + (f"GPU: {torch.cuda.get_device_name()}" if on_gpu else f"CPU only ({os.cpu_count()} cores)"),
             f"command: python benchmarks/check_seconds.py --against {options.against} --rows {rows} "
             f"--rounds {options.rounds}",
             f"one check of a recorded call of a cross entropy on ({rows}, 32000) bfloat16 logits, as the plugin's "
             f"worker makes it (the check, and the run that confirms a trap), in seconds; A = this tree, "
             f"B = {against}, A' = this tree again"]
    log = options.log.open("w") if options.log else None  # written as it goes: a run cut short keeps its rounds

    def say(line):
        print(line, flush=True)
        if log:
            log.write(line + "\n")
            log.flush()

    for line in lines:
        say(line)
    status = 0
    with tempfile.TemporaryDirectory(prefix="check-seconds-") as temporary:
        worktree = None if folder.is_dir() else Path(temporary) / "tree"
        other = folder.resolve() if worktree is None else worktree
        if worktree is not None:
            subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(worktree), options.against],
                           cwd=REPO, check=True)
        say(f"checker files' hash at B: {stamp.checker_hash(other)} (at A: {stamp.checker_hash()})")
        try:
            for reduction in REDUCTIONS:
                say(f"\nreduction {reduction!r}")
                seconds = {"A": [], "B": [], "A'": []}
                verdicts, calls, devices = {}, {}, set()
                for round_ in range(options.rounds):
                    order = ["A", "B", "A'"]
                    order = order[round_ % 3:] + order[:round_ % 3]
                    for label in order:
                        got = run_child(other if label == "B" else REPO, rows, reduction)
                        seconds[label].append(got["seconds"])
                        verdicts.setdefault(label, set()).add((got["verdict"], got["report"]))
                        calls.setdefault(label, set()).add(got["calls"])
                        devices.add(got["device"])
                    say(f"  round {round_ + 1}: " + "  ".join(f"{label} {seconds[label][-1]:6.2f}"
                                                             for label in ("A", "B", "A'")))
                ratio = [b / a for a, b in zip(seconds["A"], seconds["B"])]
                control = [c / a for a, c in zip(seconds["A"], seconds["A'"])]
                spread = max(abs(c - 1) for c in control)
                say("  median seconds: " + ", ".join(f"{label} {statistics.median(seconds[label]):.2f}"
                                                     for label in ("A", "B", "A'")))
                say(f"  B / A: median {statistics.median(ratio):.3f} (rounds {', '.join(f'{r:.3f}' for r in ratio)}); "
                    f"A' / A: {', '.join(f'{c:.3f}' for c in control)}, so the A/A spread is {spread:.3f}")
                say(f"  B slower than A in {sum(r > 1 for r in ratio)} of {len(ratio)} rounds; the op on "
                    f"{', '.join(sorted(devices))}")
                say("  the op's calls (forward and backward) in a check: "
                    + ", ".join(f"{label} {'/'.join(map(str, sorted(calls[label])))}" for label in ("A", "B", "A'")))
                if options.rounds < 3:
                    say("  too few rounds to tell a difference from noise (3 or more)")
                else:
                    differs = abs(statistics.median(ratio) - 1) > spread
                    say(f"  {'a difference' if differs else 'no difference beyond the A/A spread'}")
                here = verdicts["A"] | verdicts["A'"]
                same = here == verdicts["B"]
                say(f"  the verdict at A: {' / '.join(sorted({v[0] for v in here}))}; the two trees' verdicts and "
                    f"first reports are "
                    + ("the same, word for word and number for number, in every round" if same else "NOT the same"))
                if len(here) > 1:
                    say("  (this tree's own verdicts or reports differ from one run to another)")
                if not same:
                    for label, found in (("A", here), ("B", verdicts["B"])):
                        for _, report in sorted(found):
                            say(f"  at {label}:\n{report}")
                    status = 1
        except RuntimeError as error:
            print(f"check_seconds.py: {error}", file=sys.stderr)
            status = 1
        finally:
            if worktree is not None:
                subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=REPO, capture_output=True)
    if log:
        log.close()
    return status


if __name__ == "__main__":
    sys.exit(main())
