"""
How many of a check's calls of the op repeat a call it already made
===================================================================

Would checks that share one forward and backward bring a check within 100 times the op's own forward + backward?
This estimates what sharing could save, without touching the checker: for each kind of op of
benchmarks/check_cost.py and each size, one check with a reference and one without, where the op files every call
it gets, and times it:

  a forward    under a key of its arguments (dtype, shape, strides and every value);
  a backward   under its forward's key and a key of the grad_outputs it was handed (their layout included) and of
               which inputs want a gradient.

A forward whose key an earlier forward of the same check had is a repeat; so is a backward whose (forward, grad_output)
pair came before. A repeat shared would spare the op's own seconds and autograd's around the call (apply, the engine:
the op's seconds from outside, less those timed inside it), but not the checker's own work around it, nor the keys'
(a copy to the host and a hash each, left out of every figure). Some repeats are the point of their check (the same
call twice, writes in the forward, backward twice over one graph). It prints, per check:

  calls          forwards and backwards, and how many of each repeat an earlier one;
  op             the op's own seconds in the check (each call timed as it runs: a call on a slice of a large input
                 is cheaper than one on the whole), and the repeats' (with autograd's around them), in forward +
                 backward steps of the op on the whole (best of ten, each half apart);
  op share       those seconds as shares of the check's.

    OMP_NUM_THREADS=1 python research/check_call_repeats.py     # 1e3 1e4 1e5 1e6, on a GPU where there is one
    python research/check_call_repeats.py --kinds softplus cumsum --sizes 1e3 --out LOG

Exit status: 0 done; 2 bad arguments.
"""
import argparse
import collections
import hashlib
import inspect
import math
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "backward-check"), str(REPO / "benchmarks"), str(REPO / "tools")]
import check_cost  # noqa: E402  (the benchmark's six kinds of op, their references and sizes)
from backward_check import check_backward, runner  # noqa: E402

CURRENT = ["set-up"]
# (check, key, seconds, seconds making the key), (check, forward key, grad_output key, seconds, seconds keying)
FORWARDS, BACKWARDS = [], []


def timed(compute, *args):
    """(compute(*args), its seconds, waiting for the GPU before and after)."""
    check_cost.synchronize()
    start = time.perf_counter()
    out = compute(*args)
    check_cost.synchronize()
    return out, time.perf_counter() - start


def key(values):
    """(a key of values: each tensor's dtype, shape, strides and bytes, anything else by repr; the seconds it took,
    a copy to the host and a hash: the measurement's own work, left out of the check's seconds)."""
    start = time.perf_counter()
    digest = hashlib.sha1()
    for v in values:
        if isinstance(v, torch.Tensor):
            digest.update(repr((v.dtype, tuple(v.shape), v.stride())).encode())
            digest.update(v.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())
        else:
            digest.update(repr(v).encode())
    return digest.hexdigest(), time.perf_counter() - start


def filed(function):
    """function (a torch.autograd.Function) with every forward and backward filed under its keys."""
    class Filed(function):
        @staticmethod
        def forward(ctx, *args):
            ctx.key, keying = key(args)
            out, seconds = timed(function.forward, ctx, *args)
            FORWARDS.append((CURRENT[0], ctx.key, seconds, keying))
            return out

        @staticmethod
        def backward(ctx, *grads):
            grads_key, keying = key([*grads, ctx.needs_input_grad])  # a frozen input's backward is another call
            out, seconds = timed(function.backward, ctx, *grads)
            BACKWARDS.append((CURRENT[0], ctx.key, grads_key, seconds, keying))
            return out
    Filed.__name__ = Filed.__qualname__ = function.__name__
    # the checker reads the arguments' names from forward's signature, and is given the class, as check_cost.py
    # gives it (so "what backward returns" runs too)
    Filed.forward.__signature__ = inspect.signature(function.forward)
    return Filed


def op_halves(op, args, repeat=10):
    """The op alone, each figure the best of repeat after two warm-ups: (its forward's seconds through apply, its
    backward's through the engine, what autograd adds around a forward, and around a backward): the last two the
    seconds from outside less those the filed op timed inside."""
    def one():
        leaves = check_cost.leaves(args)
        FORWARDS.clear(), BACKWARDS.clear()
        check_cost.synchronize()
        start = time.perf_counter()
        out = op.apply(*leaves)
        check_cost.synchronize()
        middle = time.perf_counter()
        inputs = [t for t in leaves if isinstance(t, torch.Tensor) and t.requires_grad]
        torch.autograd.grad(out, inputs, torch.ones_like(out))
        check_cost.synchronize()
        end = time.perf_counter()
        (_, _, inner_f, keyed_f), = FORWARDS
        (_, _, _, inner_b, keyed_b), = BACKWARDS
        forward, backward = middle - start - keyed_f, end - middle - keyed_b
        return forward, backward, forward - inner_f, backward - inner_b
    for _ in range(2):
        one()
    timings = [one() for _ in range(repeat)]
    return tuple(max(0.0, min(t[k] for t in timings)) for k in range(4))


def repeats(calls):
    """(how many of calls, each (key, seconds), repeat an earlier one's key; their seconds)."""
    seen, count, seconds = set(), 0, 0.0
    for k, took in calls:
        if k in seen:
            count, seconds = count + 1, seconds + took
        seen.add(k)
    return count, seconds


def measure(kind, n, device, reference_mode, say):
    function, reference, make, _ = check_cost.KINDS[kind]
    args, extra = make(n, device)
    op = filed(function)
    forward_s, backward_s, around_f, around_b = op_halves(op, args)
    FORWARDS.clear(), BACKWARDS.clear()
    CURRENT[0] = "set-up"
    start = time.perf_counter()
    report = check_backward(op, *args, reference=reference if reference_mode == "ref" else None, **extra)
    check_cost.synchronize()
    keying = sum(entry[-1] for entry in FORWARDS) + sum(entry[-1] for entry in BACKWARDS)
    took = time.perf_counter() - start - keying
    forwards = [(k, seconds) for _, k, seconds, _ in FORWARDS]
    backwards = [((k, g), seconds) for _, k, g, seconds, _ in BACKWARDS]
    (again_f, saved_f), (again_b, saved_b) = repeats(forwards), repeats(backwards)
    op_s = sum(seconds for _, seconds in forwards) + sum(seconds for _, seconds in backwards)
    # a call shared would spare the op's own seconds, and autograd's around it (apply, the engine)
    saved_s = saved_f + saved_b + again_f * around_f + again_b * around_b
    step = forward_s + backward_s
    verdict = "clean" if not (report.traps or report.undecided) else "not clean"
    say(f"{kind:10s} {n:9.0e} {reference_mode:4s} forwards {len(forwards):4d} ({again_f:4d} repeats)  "
        f"backwards {len(backwards):3d} ({again_b:3d} repeats)  op {op_s / step:6.1f} steps' worth, the "
        f"repeats {saved_s / step:6.1f}  check {took:7.3f} s = {took / step:6.0f}x the op; op share "
        f"{op_s / took:5.1%}, repeats {saved_s / took:5.1%}  {verdict}")
    if report.traps or report.undecided:
        say(f"    {report}")
    by_check = collections.defaultdict(lambda: [0, 0, 0, 0])
    seen_f, seen_b = set(), set()
    for check, k, _, _ in FORWARDS:
        by_check[check][0] += 1
        by_check[check][1] += k in seen_f
        seen_f.add(k)
    for check, k, g, _, _ in BACKWARDS:
        by_check[check][2] += 1
        by_check[check][3] += (k, g) in seen_b
        seen_b.add((k, g))
    say("    " + "; ".join(f"{check} {f}f/{rf} again, {b}b/{rb} again"
                          for check, (f, rf, b, rb) in by_check.items()))
    return took / step, (took - saved_s) / step


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].strip(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--sizes", nargs="+", type=float, default=[1e3, 1e4, 1e5, 1e6])
    parser.add_argument("--kinds", nargs="+", default=list(check_cost.DEFAULT_KINDS), choices=list(check_cost.KINDS))
    parser.add_argument("--out", type=Path, help="also write everything printed here")
    options = parser.parse_args()
    if not all(math.isfinite(size) and size >= 1 for size in options.sizes):
        parser.error("--sizes must be finite, and at least 1")
    try:
        device = torch.device(options.device)
    except RuntimeError as error:
        parser.error(f"--device {options.device}: {error}")
    if device.type not in ("cpu", "cuda"):
        parser.error(f"--device {options.device}: the benchmark's ops run on cpu or cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {options.device}: no CUDA GPU here")
    if options.out and (options.out.is_dir() or not options.out.parent.is_dir()):
        parser.error(f"--out {options.out}: not a file in an existing folder")
    lines = []

    def say(line):
        print(line, flush=True)
        lines.append(line)

    attempt = runner.attempt

    def named(check, context):  # file the op's calls under the check that makes them
        CURRENT[0] = check.name
        try:
            return attempt(check, context)
        finally:
            CURRENT[0] = "set-up"
    runner.attempt = named
    import stamp
    for line in stamp.lines():
        say(line)
    say(f"machine: {platform.machine()}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
        f"device {options.device}")
    say("command: " + " ".join(["python", "research/check_call_repeats.py", *sys.argv[1:]]))
    ratios = collections.defaultdict(list)
    for n in options.sizes:
        for kind in options.kinds:
            for mode in ("ref", "fd"):
                now, shared = measure(kind, int(n), options.device, mode, say)
                ratios[(n, mode)].append((now, shared))
    say("")
    say("median over kinds: the check / the op's forward+backward, now and with every repeated call taken away")
    for (n, mode), pairs in ratios.items():
        say(f"  {n:9.0e} {mode:4s} now {statistics.median(p[0] for p in pairs):6.0f}x   "
            f"with no repeat {statistics.median(p[1] for p in pairs):6.0f}x")
    if options.out:
        options.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
