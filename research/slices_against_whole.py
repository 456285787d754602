"""
The checker on a slice against the checker on the whole, past the slice's threshold
===================================================================================

An input of strategies.SLICE_FROM elements or more is checked whole only where its size can matter (the forward,
the same call twice, the writes, a random grad_output), and on a slice of its first rows for the rest; without a
reference, the whole's finite differences go along fewer random directions, and the slice takes the random
grad_output again along all of them. This runs every case of the checker's zoos (tests/checker_zoo.py's legal code,
checker_zoo_planted.py's planted bugs, one trap or several) with its tensors tiled along their rows past that
threshold (each tile its own values, a percent apart), and checks each twice: as the checker does, on a slice, and
with slicing switched off, on the whole. The two must name the same traps. Skipped are: a case whose tensors do not
share their rows (they cannot be tiled so); a case the tiling takes out of its contract into a race (a permutation's
indices repeated); Triton cases whose kernels launch a program a row (in the CPU's interpreter, minutes at this
size), and every Triton case on the CPU that says it is one; and any case whose forward alone takes more than
--max-forward seconds at this size (on the CPU, a Triton kernel the interpreter runs: a check without a reference
calls it about 65 times, twice).

    python research/slices_against_whole.py                       # with each case's reference
    python research/slices_against_whole.py --mode fd             # without one (finite differences)
    python research/slices_against_whole.py --cases "sign error" --out LOG

At this size a verdict may differ from the zoo's own small one (a bug only small inputs take, or values the tiling
changes: a permutation's, a square matrix's): what counts is that slice and whole agree.

Exit status: 0 when every case checked named the same traps both ways, 1 otherwise, 2 on a usage error (--cases
naming no case, a --max-forward not above 0, an --out that cannot be written) or when no case could be checked here.
"""
import argparse
import difflib
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests"), str(REPO / "practice"), str(REPO / "tools")]
import stamp  # noqa: E402
from backward_checker import BACKEND, check_backward  # noqa: E402  (picks the backend first)
from backward_check import strategies  # noqa: E402

import torch  # noqa: E402
from checker_zoo import LEGAL  # noqa: E402
from checker_zoo_planted import MULTIPLE, PLANTED  # noqa: E402

# Triton cases whose grid is a program a row or a block of a large input: far too slow in the CPU's interpreter.
TOO_SLOW_INTERPRETED = ("strides from the shape", "the ragged tail dropped")
# Cases the tiling takes out of their contract into a race: a permutation tiled repeats its indices, and the backward's
# assignment through repeated indices (grad[order] = g) keeps whichever thread wrote last, so two checks of the same
# op disagree with each other, sliced or not (three runs in a row: three different sets of traps).
RACY_WHEN_TILED = ("an integer permutation it validates",)


def cases():
    """{name: (op, args, kwargs, reference, the traps the zoo names at its own size)}."""
    every = {name: (*case[:4], (case[4],)) for name, case in PLANTED.items()}
    every.update({name: case for name, case in MULTIPLE.items()})
    every.update({name: (*case, ()) for name, case in LEGAL.items()})
    return every


def tiled(args):
    """args with every tensor's rows tiled past SLICE_FROM elements for the largest, or None where the tensors do
    not share their rows."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    rows = {a.shape[0] for a in tensors if a.dim()}
    if len(rows) != 1:
        return None
    times = -(-strategies.SLICE_FROM // max(a.numel() for a in tensors)) + 1
    generator = torch.Generator().manual_seed(1)
    out = []
    for a in args:
        if isinstance(a, torch.Tensor) and a.dim():
            t = a.detach().repeat(times, *([1] * (a.dim() - 1)))
            if t.is_floating_point():
                t = t * (1 + 0.01 * torch.randn(t.shape, generator=generator, dtype=t.dtype).to(t.device))
            out.append(t.requires_grad_(a.requires_grad))
        else:
            out.append(a)
    return tuple(out)


def uses_triton(op):
    return "triton" in repr(op).lower() or "triton" in repr(getattr(op, "backward", "")).lower()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("ref", "fd"), default="ref", help="with the reference, or without")
    parser.add_argument("--cases", nargs="+", default=(), help="only the cases whose names hold one of these")
    parser.add_argument("--out", type=Path, help="also write everything printed here, line by line")
    parser.add_argument("--max-forward", type=float, default=0.25, help="skip a case whose forward takes longer (s)")
    options = parser.parse_args()
    if not options.max_forward > 0:
        parser.error(f"--max-forward must be above 0 seconds, not {options.max_forward:g}")
    chosen = {name: case for name, case in cases().items()
              if not options.cases or any(c in name for c in options.cases)}
    if not chosen:
        near = sorted({m for c in options.cases for m in difflib.get_close_matches(c, cases(), n=3, cutoff=0.4)})
        parser.error(f"--cases {' '.join(map(repr, options.cases))} is part of no case's name"
                     + (f" (near: {'; '.join(near)})" if near else "")
                     + "; the names are those of tests/checker_zoo.py and tests/checker_zoo_planted.py")
    try:
        out = options.out.open("w") if options.out else None
    except OSError as error:
        parser.error(f"--out {options.out}: {error.strerror or error}")
    log = [*stamp.lines(), (f"torch {torch.__version__}, {BACKEND}; mode {options.mode}; "
                            f"slice from {strategies.SLICE_FROM} elements to about {strategies.SLICED_NUMEL}"), ""]

    def say(line):
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()
    for line in list(log):
        say(line)
    differ = checked = 0
    for name, (op, args, kwargs, reference, traps) in chosen.items():
        if any(slow in name for slow in TOO_SLOW_INTERPRETED) or (BACKEND != "cuda" and uses_triton(op)):
            say(f"skipped (a Triton kernel, too slow here) {name}")
            continue
        if name in RACY_WHEN_TILED:
            say(f"skipped (tiled, its indices repeat, and its backward races on them) {name}")
            continue
        large = tiled(args)
        if large is None:
            say(f"skipped (its tensors do not share their rows) {name}")
            continue
        started = time.perf_counter()
        try:
            with torch.no_grad():
                op(*large, **kwargs) if not isinstance(op, type) else op.apply(*large, **kwargs)
        except Exception:  # noqa: BLE001  (the check itself says what the op does with these)
            pass
        if time.perf_counter() - started > options.max_forward:
            say(f"skipped (its forward takes {time.perf_counter() - started:.1f} s at this size) {name}")
            continue
        given = reference if options.mode == "ref" else None
        try:
            start = time.perf_counter()
            sliced = check_backward(op, *large, reference=given, **kwargs)
            middle = time.perf_counter()
            threshold, strategies.SLICE_FROM = strategies.SLICE_FROM, 1 << 62  # slicing off: every check whole
            try:
                whole = check_backward(op, *large, reference=given, **kwargs)
            finally:
                strategies.SLICE_FROM = threshold
            end = time.perf_counter()
        except Exception as error:  # noqa: BLE001  (a usage error at this size, as the tiling made it)
            say(f"refused at this size ({type(error).__name__}: {str(error)[:90]}) {name}")
            continue
        same = sorted(sliced.traps) == sorted(whole.traps)
        differ += not same
        checked += 1
        say(f"{'same' if same else 'DIFFER'}  {name}: sliced {sorted(sliced.traps)} ({middle - start:.1f} s, "
            f"{'on a slice' if 'slice' in sliced.checked else 'not sliced'}), whole {sorted(whole.traps)} "
            f"({end - middle:.1f} s); the zoo's own size: {sorted(traps)}")
    if not checked:
        say(f"\nno case was checked: each of the {len(chosen)} chosen was skipped or refused here")
    else:
        say(f"\n{differ} case(s) of {checked} checked differ between the slice and the whole")
    if out:
        out.close()
    return 2 if not checked else 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
