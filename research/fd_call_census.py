"""
Where finite differences spend a check's calls of the op
========================================================

Without a reference, most of a check's calls of the op are finite differences (benchmarks/check_cost.py counts
189 forwards for softplus at 10^3 elements, of which 24 are the checks' own). Which inputs are they of? A check
differences the given inputs and, where those are smaller than a few blocks, the same values grown past several
blocks; a large input is differenced whole and again on its slice. This counts, without touching the checker,
each set of finite differences a check builds (checks.truth.FiniteDifferences): the elements of its inputs,
whether it samples columns (a grown input) or takes them all or goes along directions, and the calls of the op
it makes. For each kind of op of benchmarks/check_cost.py and each size, one check without a reference.

    python research/fd_call_census.py                                  # 1e3 1e4 1e5 1e6, on the CPU
    python research/fd_call_census.py --kinds softplus --sizes 1e3 --out LOG

Exit status: 0 done; 2 bad arguments.
"""
import argparse
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "backward-check"), str(REPO / "benchmarks"), str(REPO / "tools")]
import check_cost  # noqa: E402  (the benchmark's six kinds of op and their sizes)
import stamp  # noqa: E402
from backward_check import check_backward  # noqa: E402
from backward_check.checks import truth  # noqa: E402

# One row per FiniteDifferences built: [the elements of the inputs it differences, how their columns went, its calls]
BUILT = []


def counting():
    """Wrap FiniteDifferences so that each one built files a row in BUILT, and each call of the op it makes counts
    there (its calls after it is built, for a second input differenced later, count too)."""
    original_init, original_call = truth.FiniteDifferences.__init__, truth.FiniteDifferences._call

    def init(self, op, values, graded, sample=False, contracts=None, directions=None):
        self._census = [[values[i].numel() for i in op.inputs], "", 0]
        BUILT.append(self._census)
        original_init(self, op, values, graded, sample, contracts, directions)
        ways = sorted({"directions" if i in self.directions else ("sampled columns" if sample else "every column")
                       for i in op.inputs})
        self._census[1] = ", ".join(ways)

    def call(self, values):
        self._census[2] += 1
        return original_call(self, values)

    truth.FiniteDifferences.__init__ = init
    truth.FiniteDifferences._call = call


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", type=float, default=[1e3, 1e4, 1e5, 1e6])
    parser.add_argument("--kinds", nargs="+", default=list(check_cost.DEFAULT_KINDS), choices=list(check_cost.KINDS))
    parser.add_argument("--out", type=Path, help="also write everything printed here")
    options = parser.parse_args()
    if not all(1 <= s < 1e12 for s in options.sizes):
        parser.error("--sizes: each size is a count of elements, 1 or more")
    if options.out:  # refused before any work, not after it
        try:
            options.out.write_text("")
        except OSError as error:
            parser.error(f"--out {options.out}: {error.strerror or error}")
    lines = [*stamp.lines(),
             f"torch {torch.__version__}, on the CPU; one check of each kind and size, without a reference",
             "each set of finite differences the check built: its inputs' elements, how its columns went, its calls of "
             "the op", ""]
    counting()
    device = torch.device("cpu")
    for n in (int(s) for s in options.sizes):
        for kind in options.kinds:
            fn, _, make, what = check_cost.KINDS[kind]
            torch.manual_seed(0)
            args, extra = make(n, device)
            BUILT.clear()
            report = check_backward(fn, *args, **extra)  # as check_cost.py checks it (a loss's target held, say)
            total = sum(row[2] for row in BUILT)
            lines.append(f"{kind} at {n:.0e}: {total} calls of the op in finite differences, "
                         f"{'clean' if report.clean else 'NOT clean'}")
            for elements, ways, calls in BUILT:
                lines.append(f"  inputs of {', '.join(f'{e:,}' for e in elements)} elements ({ways}): {calls} calls")
    text = "\n".join(lines)
    print(text)
    if options.out:
        options.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
