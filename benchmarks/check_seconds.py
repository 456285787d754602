"""
What one check of a large op costs, at this tree against another
================================================================

The pytest plugin's cost on a suite of large ops is mostly its checks. This times one check_backward of a
large cross entropy written in torch ops, shaped as Liger-Kernel 0.5.8's is (its forward writes the gradient
into the logits; with reduction 'none' its backward reads grad_output's first element alone), at this tree
and at another revision of the repository (a git worktree of it, made and removed here), in separate
processes, each after a warm-up check of its own:

  a round      one check at this tree (A), one at the other (B), and one at this tree again (A'), in an
               order that rotates from round to round, so that drift on a shared machine weighs on all three;
  the ratio    B / A in each round, and its median;
  the A/A      A' / A: the same code, so its distance from 1 is noise. A ratio is called a difference only
               where its median lies further from 1 than the largest A/A distance of the same run.

It also compares the two trees' reports, word for word and number for number (their seconds aside): a change
made for speed must not change what the checker says. On a CUDA GPU the op runs there (8192 x 32000 bfloat16 logits by default, Liger's own size);
else on the CPU (112 x 32000: past the size where the checker holds its finite-difference directions).

    python benchmarks/check_seconds.py --against REV [--rows N] [--rounds R] [--log PATH]

Exit status: 0 done; 2 bad arguments (a revision git does not know); 1 a check failed to run, or the two trees'
reports differ.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REDUCTIONS = ("sum", "none")


def cross_entropy():
    """Liger-Kernel 0.5.8's cross entropy in torch ops: the forward writes the gradient into the logits (and
    saves them), and 'none' scales by grad_output's first element."""
    import torch

    class InPlaceCrossEntropy(torch.autograd.Function):
        @staticmethod
        def forward(ctx, logits, target, reduction):
            wide = logits.float()
            loss = torch.logsumexp(wide, -1) - wide.gather(-1, target[:, None])[:, 0]
            gradient = torch.softmax(wide, -1)
            gradient[torch.arange(len(target), device=target.device), target] -= 1
            if reduction == "mean":
                gradient /= len(target)
            logits.copy_(gradient.to(logits.dtype))
            ctx.save_for_backward(logits)
            ctx.reduction = reduction
            total = loss if reduction == "none" else loss.sum() if reduction == "sum" else loss.mean()
            return total.to(logits.dtype)

        @staticmethod
        def backward(ctx, grad_output):
            gradient, = ctx.saved_tensors
            scale = grad_output.reshape(-1)[0] if ctx.reduction == "none" else grad_output
            return gradient * scale, None, None

    return InPlaceCrossEntropy


def child(checker, rows, reduction):
    """One warm-up check and one timed check, with the checker found in checker; prints a JSON line."""
    sys.path.insert(0, str(Path(checker) / "backward-check"))
    import torch
    from backward_check import DEVICE, check_backward
    op = cross_entropy()
    generator = torch.Generator().manual_seed(rows)

    def logits_and_target(n):
        logits = torch.randn(n, 32000, generator=generator).to(torch.bfloat16)
        return logits.to(DEVICE), torch.randint(0, 32000, (n,), generator=generator).to(DEVICE)

    check_backward(op, *logits_and_target(4), reduction)  # imports, first calls
    report = check_backward(op, *logits_and_target(rows), reduction)
    said = re.sub(r"\(\d+(\.\d+)? s\)", "", str(report))  # the whole report, its seconds left out
    print(json.dumps({"seconds": report.seconds, "report": said, "traps": report.traps}))


def run_child(checker, rows, reduction):
    done = subprocess.run([sys.executable, __file__, "--child", str(checker), "--rows", str(rows),
                           "--reduction", reduction], capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"the check at {checker} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", help="the other revision (a commit, a tag, HEAD~1)")
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
    known = subprocess.run(["git", "rev-parse", "--verify", "--quiet", options.against + "^{commit}"], cwd=REPO,
                           capture_output=True, text=True)
    if known.returncode != 0:
        parser.error(f"--against {options.against}: not a revision this repository has")
    import torch
    on_gpu = torch.cuda.is_available()
    rows = options.rows or (8192 if on_gpu else 112)
    sys.path.insert(0, str(REPO / "tools"))
    import stamp
    lines = [*stamp.lines(), f"python {sys.version.split()[0]}, torch {torch.__version__}, "
             + (f"GPU: {torch.cuda.get_device_name()}" if on_gpu else f"CPU only ({os.cpu_count()} cores)"),
             f"command: python benchmarks/check_seconds.py --against {options.against} --rows {rows} "
             f"--rounds {options.rounds}",
             f"one check_backward of a cross entropy on ({rows}, 32000) bfloat16 logits, seconds as the report "
             f"counts them; A = this tree, B = {options.against} ({known.stdout.strip()[:12]}), A' = this tree "
             f"again"]

    def say(line):
        lines.append(line)
        print(line, flush=True)

    for line in lines:
        print(line, flush=True)
    status = 0
    with tempfile.TemporaryDirectory(prefix="check-seconds-") as folder:
        other = Path(folder) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(other), options.against], cwd=REPO,
                       check=True)
        try:
            for reduction in REDUCTIONS:
                say(f"\nreduction {reduction!r}")
                seconds = {"A": [], "B": [], "A'": []}
                verdicts = {}
                for round_ in range(options.rounds):
                    order = ["A", "B", "A'"]
                    order = order[round_ % 3:] + order[:round_ % 3]
                    for label in order:
                        got = run_child(other if label == "B" else REPO, rows, reduction)
                        seconds[label].append(got["seconds"])
                        verdicts.setdefault(label, (got["traps"], got["report"]))
                    say(f"  round {round_ + 1}: " + "  ".join(f"{label} {seconds[label][-1]:6.2f}"
                                                             for label in ("A", "B", "A'")))
                ratio = [b / a for a, b in zip(seconds["A"], seconds["B"])]
                control = [c / a for a, c in zip(seconds["A"], seconds["A'"])]
                spread = max(abs(c - 1) for c in control)
                say("  median seconds: " + ", ".join(f"{label} {statistics.median(seconds[label]):.2f}"
                                                     for label in ("A", "B", "A'")))
                say(f"  B / A: median {statistics.median(ratio):.3f} (rounds {', '.join(f'{r:.3f}' for r in ratio)}); "
                    f"A' / A: {', '.join(f'{c:.3f}' for c in control)}, so the A/A spread is {spread:.3f}")
                if options.rounds < 3:
                    say("  too few rounds to tell a difference from noise (3 or more)")
                else:
                    differs = abs(statistics.median(ratio) - 1) > spread
                    say(f"  {'a difference' if differs else 'no difference beyond the A/A spread'}")
                same = verdicts["A"] == verdicts["B"]
                say(f"  the traps at A: {'; '.join(verdicts['A'][0]) or 'none'}; the two trees' reports are "
                    + ("the same, word for word and number for number" if same else "NOT the same"))
                if not same:
                    say("  at A:\n" + verdicts["A"][1] + "\n  at B:\n" + verdicts["B"][1])
                    status = 1
        except RuntimeError as error:
            print(f"check_seconds.py: {error}", file=sys.stderr)
            status = 1
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(other)], cwd=REPO, capture_output=True)
    if options.log:
        options.log.write_text("\n".join(lines) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
