"""
What a check costs, against the op's own forward and backward
=============================================================

The checker's goal is that checking an op cost at most 100 times the op's own forward + backward (the median
over kinds of op; the worst at most 300 times), on the CPU and on a GPU, for inputs of 10^3 to 10^8 elements.
This measures where it stands. For six kinds of op, each a small torch.autograd.Function written in plain PyTorch
(so it runs on the CPU and on a GPU) with a right backward and a plain-torch reference:

  softplus     elementwise
  softmax      a row reduction (softmax over the last dimension)
  mse          a loss with a `reduction` argument (mean squared error, reduction='mean'; mse_none: 'none')
  linear_ce    a matmul-based fused loss: linear layer + cross entropy in one Function
  attention    softmax(Q K^T / sqrt(d)) V
  cumsum       a scan (cumulative sum over the last dimension)

and for each size (the elements of the op's first input), it times:

  the op       its forward + backward (best of --repeat, after warm-up, waiting for the GPU);
  ref          check_backward(op, ..., reference=the plain-torch reference);
  fd           check_backward(op, ...) without one (finite differences: what the pytest plugin runs);
  plugin       the plugin's work for one new signature: the call recorded (its arguments copied), sent to the
               worker process and checked there (worker.Worker.check, as pytest_backward_check does; the
               worker's start and its first check, a warm-up, are timed once, apart);

and gives each as a ratio to the op's forward + backward. Then it breaks each check down, without touching the
checker: the op counts its own calls and the seconds spent in it, by which of the checker's checks (the
runner's name for it) and which function of the checker's modules made the call; and the same check, run
again under cProfile, attributes the rest to the checker's own work: torch calls by kind (copies, dtype
conversions, comparisons and error arithmetic, random draws, autograd's engine with the reference's
backward) and the checker's functions that make them. It ends with a summary: the median and the worst ratio
over kinds, per size, and writes everything printed to --out.

    python benchmarks/check_cost.py                                     # CPU, sizes 1e3 1e4 1e5 1e6
    OMP_NUM_THREADS=1 python benchmarks/check_cost.py --out benchmarks/results/check_cost_cpu.log
    python benchmarks/check_cost.py --device cuda --sizes 1e3 1e5 1e7 1e8 --breakdown-max 1e5 \
        --max-minutes 3.5 --out run.log                                 # a CUDA GPU
    python benchmarks/check_cost.py --kinds softplus attention --sizes 1e4 --repeat 20
    python benchmarks/check_cost.py --no-breakdown --no-plugin --max-minutes 10
    python benchmarks/check_cost.py --checker DIR ...                   # the checker of the tree in DIR

An A/B of two checkers: put the other tree's checker in a folder (`mkdir DIR; git archive REV backward-check |
tar -x -C DIR`), then run the same command in turns with --checker DIR and without, twice each (B, A, B, A): the
two runs of one checker are its A/A, and a difference between the checkers counts only where it is larger than
that.

On a machine shared with other work, OMP_NUM_THREADS=1 keeps the timings steady (the committed CPU log
was made so): with more threads than free cores, the op's own best-of-ten swung from run to run. Sizes
run in the order given, every kind at one size before the next; the log is written line by line.

Exit status: 0 done (every ratio is printed, whatever it is); 2 bad arguments.
"""
import argparse
import collections
import cProfile
import math
import os
import platform
import pstats
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent
CHECKER = REPO / "backward-check" / "backward_check"
sys.path[:0] = [str(REPO / "backward-check"), str(REPO / "tools")]
# The checker of another tree (--checker), named in the environment: the plugin's worker, a spawned process, runs
# this file again as its main module, and must import that checker too, not this tree's.
OTHER_CHECKER = "CHECK_COST_OTHER_CHECKER"
if os.environ.get(OTHER_CHECKER):
    CHECKER = Path(os.environ[OTHER_CHECKER]).resolve() / "backward-check" / "backward_check"  # the header says so
    sys.path.insert(0, str(CHECKER.parent))

# %%
# Counting the op's calls
# -----------------------
# Every op below calls `counted` around its forward and its backward. Off (the worker process, the op's own
# timing), it costs an `if`. On, it counts the call, times it (waiting for the GPU where TIMED is set: the
# profiled run), and files it under the runner's check that is running (CURRENT, set by a wrapper around
# runner.attempt) and the checker's function that made the call: the first frame, walking out from the op,
# in backward_check's modules other than calling.py and context.py's generic call helpers. A backward is filed
# where its forward was (ctx.caller): on a GPU autograd runs it on a thread of its own, with no caller frames.

COUNTING = False
TIMED = False
CURRENT = ["set-up (inputs, the right gradient, the op's noise)"]
CALLS = collections.Counter()        # (check, caller, "forward" | "backward") -> calls
SPENT = collections.Counter()        # the same -> seconds in the op
GENERIC = {"calling", "__init__", "runner"}
GENERIC_CONTEXT = {"run", "grads", "vjp", "grad_of", "__init__", "outputs"}


def synchronize():
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def caller():
    frame = sys._getframe(3)
    while frame is not None:
        path = frame.f_code.co_filename
        if path.startswith(str(CHECKER)):
            module = Path(path).stem
            name = frame.f_code.co_name
            if module not in GENERIC and not (module == "context" and name in GENERIC_CONTEXT):
                return f"{module}.{name}"
        frame = frame.f_back
    return "(outside the checker)"


def counted(ctx, which, compute, *args):
    if not COUNTING:
        return compute(*args)
    if which == "forward":
        ctx.caller = (CURRENT[0], caller())
    key = (*getattr(ctx, "caller", (CURRENT[0], "(unknown)")), which)
    if TIMED:
        synchronize()
    start = time.perf_counter()
    result = compute(*args)
    if TIMED:
        synchronize()
    CALLS[key] += 1
    SPENT[key] += time.perf_counter() - start
    return result


# %%
# The ops
# -------
# Each is a torch.autograd.Function with a right backward, in plain PyTorch, and a reference made of torch's
# own differentiable ops. `make(n, device)` gives its arguments for about n elements in the first input, with
# the keywords check_backward needs (no_grad: a float target that takes no gradient).

class Softplus(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = counted(ctx, "forward", F.softplus, x)
        ctx.save_for_backward(x)
        return y

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return counted(ctx, "backward", lambda: g * torch.sigmoid(x))


class Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = counted(ctx, "forward", torch.softmax, x, -1)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        y, = ctx.saved_tensors
        return counted(ctx, "backward", lambda: y * (g - (g * y).sum(-1, keepdim=True)))


class MSELoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, target, reduction="mean"):
        def compute():
            squared = (input - target) ** 2
            return {"mean": squared.mean, "sum": squared.sum, "none": lambda: squared}[reduction]()
        ctx.save_for_backward(input, target)
        ctx.reduction = reduction
        return counted(ctx, "forward", compute)

    @staticmethod
    def backward(ctx, g):
        input, target = ctx.saved_tensors

        def compute():
            grad = 2 * (input - target) * g
            if ctx.reduction == "mean":
                grad = grad / input.numel()
            return grad, (-grad if ctx.needs_input_grad[1] else None), None
        return counted(ctx, "backward", compute)


class LinearCrossEntropy(torch.autograd.Function):
    """x @ W^T, then cross entropy with integer targets, in one Function: the backward recomputes the logits
    rather than saving them (what fused linear-cross-entropy kernels do to save memory)."""

    @staticmethod
    def forward(ctx, x, weight, target, reduction="mean"):
        def compute():
            logits = x @ weight.t()
            loss = torch.logsumexp(logits, -1) - logits.gather(-1, target[:, None])[:, 0]
            return loss.mean() if reduction == "mean" else loss
        ctx.save_for_backward(x, weight, target)
        ctx.reduction = reduction
        return counted(ctx, "forward", compute)

    @staticmethod
    def backward(ctx, g):
        x, weight, target = ctx.saved_tensors

        def compute():
            p = torch.softmax(x @ weight.t(), -1)
            p[torch.arange(len(target), device=p.device), target] -= 1
            p = p * (g / len(target) if ctx.reduction == "mean" else g[:, None])
            return p @ weight, p.t() @ x, None, None
        return counted(ctx, "backward", compute)


class Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        def compute():
            p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), -1)
            return p @ v, p
        out, p = counted(ctx, "forward", compute)
        ctx.save_for_backward(q, k, v, p)
        return out

    @staticmethod
    def backward(ctx, g):
        q, k, v, p = ctx.saved_tensors

        def compute():
            scale = 1 / math.sqrt(q.shape[-1])
            dv = p.transpose(-1, -2) @ g
            dp = g @ v.transpose(-1, -2)
            ds = p * (dp - (dp * p).sum(-1, keepdim=True)) * scale
            return ds @ k, ds.transpose(-1, -2) @ q, dv
        return counted(ctx, "backward", compute)


class Cumsum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return counted(ctx, "forward", torch.cumsum, x, -1)

    @staticmethod
    def backward(ctx, g):
        return counted(ctx, "backward", lambda: g.flip(-1).cumsum(-1).flip(-1))


def rows_of(n, width=1000):
    return max(1, round(n / width)), min(width, n)


def randn(*shape, device, grad=True):
    return torch.randn(*shape, device=device).requires_grad_(grad)


def attention_shape(n, d=64):
    t = max(1, min(256, n // d))
    return max(1, n // (t * d)), t, d


def reference_softmax(x):
    return torch.softmax(x, -1)


def reference_mse(x, t, reduction="mean"):
    return F.mse_loss(x, t, reduction=reduction)


def reference_linear_ce(x, w, t, reduction="mean"):
    return F.cross_entropy(x @ w.t(), t, reduction=reduction)


def reference_attention(q, k, v):
    return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), -1) @ v


def reference_cumsum(x):
    return torch.cumsum(x, -1)


KINDS = {
    # kind: (Function, reference, make(n, device) -> (args, kwargs for check_backward), what it is)
    "softplus": (Softplus, F.softplus, lambda n, dev: ((randn(*rows_of(n), device=dev),), {}), "elementwise"),
    "softmax": (Softmax, reference_softmax, lambda n, dev: ((randn(*rows_of(n), device=dev),), {}),
                "row reduction"),
    "mse": (MSELoss, reference_mse,
            lambda n, dev: ((randn(*rows_of(n), device=dev), randn(*rows_of(n), device=dev, grad=False), "mean"),
                            {"no_grad": ("target",)}), "loss, reduction='mean'"),
    "mse_none": (MSELoss, reference_mse,
                 lambda n, dev: ((randn(*rows_of(n), device=dev), randn(*rows_of(n), device=dev, grad=False),
                                  "none"), {"no_grad": ("target",)}), "loss, reduction='none'"),
    "linear_ce": (LinearCrossEntropy, reference_linear_ce,
                  lambda n, dev: ((randn(max(1, n // 64), 64, device=dev),
                                   (0.1 * torch.randn(128, 64, device=dev)).requires_grad_(),
                                   torch.randint(0, 128, (max(1, n // 64),), device=dev), "mean"), {}),
                  "fused linear + cross entropy (64 features, 128 classes)"),
    "attention": (Attention, reference_attention,
                  lambda n, dev: (tuple(randn(*attention_shape(n), device=dev) for _ in range(3)), {}),
                  "softmax(QK^T/sqrt(d))V, d=64, up to 256 positions"),
    "cumsum": (Cumsum, reference_cumsum, lambda n, dev: ((randn(*rows_of(n), device=dev),), {}),
               "scan (cumulative sum over rows of up to 1000)"),
}
DEFAULT_KINDS = ("softplus", "softmax", "mse", "linear_ce", "cumsum", "attention")  # the slowest to check last


# %%
# The op's own forward + backward
# -------------------------------
# Fresh leaves each time (as a training step's activations), a grad_output drawn once; best of `repeat` after
# two warm-ups, the GPU's work included.

def leaves(args):
    return tuple(a.detach().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a for a in args)


def op_seconds(fn, args, repeat):
    out = fn.apply(*leaves(args))
    grad_output = torch.randn_like(out)
    best = math.inf
    for i in range(repeat + 2):
        step = leaves(args)
        synchronize()
        start = time.perf_counter()
        fn.apply(*step).backward(grad_output)
        synchronize()
        if i >= 2:
            best = min(best, time.perf_counter() - start)
    return best


# %%
# One check, timed, and the same again under cProfile
# ---------------------------------------------------
# check_backward with the reference ("ref") or without ("fd"). The runner's checks are told apart by wrapping
# runner.attempt, the one function each check goes through (as research/wild/check_cost.py does).

def check_seconds(fn, args, extra, reference, profile=False):
    from backward_check import check_backward, runner
    global COUNTING, TIMED
    CALLS.clear(), SPENT.clear()
    attempt = runner.attempt
    per_check = collections.Counter()

    def named(check, context):
        CURRENT[0] = check.name
        start = time.perf_counter()
        try:
            return attempt(check, context)
        finally:
            synchronize() if profile else None
            per_check[check.name] += time.perf_counter() - start
            CURRENT[0] = "set-up (grown inputs: the right gradient, the op's noise)"

    CURRENT[0] = "set-up (given inputs: the right gradient, the op's noise)"
    runner.attempt, COUNTING, TIMED = named, True, profile
    profiler = cProfile.Profile() if profile else None
    try:
        synchronize()
        start = time.perf_counter()
        if profiler:
            profiler.enable()
        report = check_backward(fn, *args, reference=reference, **extra)
        synchronize()
        if profiler:
            profiler.disable()
        took = time.perf_counter() - start
    finally:
        runner.attempt, COUNTING, TIMED = attempt, False, False
    verdict = "clean" if not (report.traps or report.undecided) else \
        ("TRAP " + "; ".join(report.traps) if report.traps else "undecided")
    return took, verdict, dict(CALLS), dict(SPENT), per_check, profiler


# %%
# The plugin's work for one new signature
# ---------------------------------------
# As pytest_backward_check does: the call's signature, copies of its arguments (recording.copy_arguments), its
# job (worker.job_of), and the round trip through the worker process (worker.Worker.check: the parcel written,
# the check_call there with the generators seeded, the verdict read back).

def plugin_seconds(worker, fn, args):
    from backward_check.plugin import recording
    from backward_check.plugin.worker import job_of
    synchronize()
    start = time.perf_counter()
    no_grad = recording._no_grad_of(args, {})
    signature, described = recording.signature_of(args, {}, {})
    tensors = list(recording.tensors_in(args))
    call = recording.RecordedCall(fn, recording.op_name(fn), signature, described, no_grad, "check_cost.py",
                                  sum(t.numel() * t.element_size() for t in tensors))
    call.args, call.kwargs = recording.copy_arguments(tuple(args), {})
    recorded = time.perf_counter() - start
    verdict, why = worker.check(call, job_of(call, no_grad))
    took = time.perf_counter() - start
    return took, recorded, (why or verdict.summary)


# %%
# Where a check's time goes
# -------------------------
# From the profile: every function's own time (cProfile's tottime), split by who called it. What the op's
# forward and backward call is the op's; the rest is the checker's, grouped by the kind of torch call (a
# builtin's name) and by the checker's function that made it. Autograd's engine (run_backward) holds torch's
# own backward formulas: the reference's backward, and the checker's float64 graph. "The checker's Python" is
# its functions' own time, which holds the tensor arithmetic it writes with operators (a - b, a * b: cProfile
# sees no call there). On a GPU, a torch call's time lands where the CPU waits for the GPU (an .item(), a
# comparison's result), not where the kernel ran. cProfile slows Python down, most where a check makes many
# small calls: the shares are of the profiled run's own seconds, which the breakdown prints beside the op's.

WORK = (
    ("seeding (torch.manual_seed)", ("manual_seed",)),
    ("copies", ("clone", "copy_", "contiguous", "empty_like", "zeros_like", "ones_like", "full_like", "new_empty",
                "new_zeros", "empty_strided", "as_strided", "detach", "requires_grad_", "'cat'", "stack")),
    ("dtype conversions (.to, .double)", ("'to'", "double", "'float'", "'type'", "half", "bfloat16")),
    ("comparisons and error arithmetic", ("allclose", "isclose", "equal", "'eq'", "'ne'", "isfinite", "isnan",
                                          "'abs'", "'sub'", "__sub__", "amax", "'max'", "maximum", "norm",
                                          "linalg", "where", "'any'", "'all'", "'item'", "tolist", "sort",
                                          "topk", "argmax", "nan_to_num", "round")),
    ("random draws", ("randn", "rand", "normal_", "uniform_", "Generator", "get_rng_state", "set_rng_state",
                      "randperm", "fork_rng")),
    ("autograd (the engine, the reference's float64 backward, Function.apply)",
     ("run_backward", "autograd.__init__.grad", "autograd.__init__.backward", "autograd.grad", "autograd.backward",
      "function.apply", "'apply'")),
    ("the reference's forward", ("reference_", "check_cost.")),
    ("imports and tracebacks", ("traceback", "linecache", "importlib", "inspect", "_find_and_load")),
)


def work_of(entry):
    for kind, words in WORK:
        if any(w in entry for w in words):
            return kind
    return "other torch calls"


def label(func):
    path, line, name = func
    if path == "~":
        return name.replace("torch._C.TensorBase", "Tensor").replace("<built-in method ", "<")
    module = Path(path).stem
    for root in ("torch", "traceback", "linecache", "inspect", "importlib"):
        if f"/{root}/" in path or module == root:
            module = path.split("site-packages/")[-1].replace("/", ".").removesuffix(".py") \
                if "site-packages" in path else module
            break
    return f"{module}.{name}"


def in_checker(func):
    return func[0].startswith(str(CHECKER))


def is_op(func):
    return func[0] == __file__ and func[2] in ("forward", "backward", "compute", "<lambda>", "counted", "caller",
                                               "synchronize")


def breakdown(profiler, spent, calls, per_check, top):
    """Lines: the op's share, its time by check and by caller, the checker's own work by kind and by function.
    Each function's own time (tottime) goes, through cProfile's caller graph (shared by cumulative time where a
    function has several callers), to the 'entry': the torch or library call that the checker's code made
    (torch.manual_seed, Tensor.clone, torch.autograd.grad), and to the checker's function that made it. What the
    op calls is the op's."""
    stats = pstats.Stats(profiler).stats
    total = max(ct for (_, _, tt, ct, _) in stats.values())
    memo = {}

    def entries(func, depth=0):
        # {(entry, checker function) or "op": share} for time spent in func, by who called it
        if func in memo:
            return memo[func]
        memo[func] = {}
        callers = stats[func][4] if func in stats else {}
        weight = sum(v[3] for v in callers.values()) or 1.0
        shares = collections.Counter()
        for c, v in callers.items():
            w = (v[3] / weight) if weight else 1.0 / len(callers)
            if is_op(c):
                shares["op"] += w
            elif in_checker(c):
                shares[(label(func), label(c))] += w
            elif depth < 60:
                for key, s in entries(c, depth + 1).items():
                    shares[key] += w * s
        if not callers:
            shares[("(top level)", "")] += 1.0
        memo[func] = shares
        return shares

    by_entry, by_function, entry_calls = collections.Counter(), collections.Counter(), collections.Counter()
    for func, (cc, nc, tt, ct, callers) in stats.items():
        if is_op(func):
            continue
        if in_checker(func):
            by_entry[("the checker's Python", label(func))] += tt
            by_function[label(func)] += tt
            continue
        for key, share in entries(func).items():
            if key == "op":
                continue
            entry, who = key
            by_entry[(entry, who)] += tt * share
            by_function[who] += tt * share
    for func, (cc, nc, tt, ct, callers) in stats.items():
        for c, v in (callers or {}).items():
            if in_checker(c) and not in_checker(func) and not is_op(func):
                entry_calls[label(func)] += v[1]
    by_kind, by_api = collections.Counter(), collections.Counter()
    for (entry, who), s in by_entry.items():
        by_kind["the checker's Python" if entry == "the checker's Python" else work_of(entry)] += s
        if entry != "the checker's Python":
            by_api[entry] += s
    op_own = sum(spent.values())
    lines = []
    n_fwd = sum(c for k, c in calls.items() if k[2] == "forward")
    n_bwd = sum(c for k, c in calls.items() if k[2] == "backward")
    lines.append(f"    profiled run {total:7.2f} s; in the op {op_own:7.3f} s ({100 * op_own / total:4.1f}%), "
                 f"{n_fwd} forwards, {n_bwd} backwards")
    by_check, calls_by_check = collections.Counter(), collections.Counter()
    for (check, _, _), s in spent.items():
        by_check[check] += s
    for (check, _, _), c in calls.items():
        calls_by_check[check] += c
    lines.append("    by check (whole, with [op seconds, op calls] inside):  " + "; ".join(
        f"{name} {s:.2f} s [{by_check[name]:.2f}, {calls_by_check[name]}]" for name, s in per_check.most_common(top)))
    setups = {k: v for k, v in by_check.items() if k.startswith("set-up")}
    if setups:
        lines.append("    outside the checks:  " + "; ".join(
            f"{k}: [{v:.2f} s, {calls_by_check[k]} calls]" for k, v in setups.items()))
    by_caller, calls_by_caller = collections.Counter(), collections.Counter()
    for (_, who, _), s in spent.items():
        by_caller[who] += s
    for (_, who, _), c in calls.items():
        calls_by_caller[who] += c
    lines.append("    op calls by the checker's function that made them:  " + "; ".join(
        f"{who} {calls_by_caller[who]} ({s:.2f} s)" for who, s in
        sorted(by_caller.items(), key=lambda kv: -calls_by_caller[kv[0]])[:top]))
    lines.append("    the checker's own work, by kind:  " + "; ".join(
        f"{kind} {s:.2f} s ({100 * s / total:.0f}%)" for kind, s in by_kind.most_common()))
    lines.append("    the calls it makes (with all beneath them):  " + "; ".join(
        f"{name} {s:.2f} s x{entry_calls[name]}" for name, s in by_api.most_common(top)))
    lines.append("    its functions (own Python + the calls they make):  " + "; ".join(
        f"{name} {s:.2f} s" for name, s in by_function.most_common(top)))
    return lines


# %%
# The header: which tree, which checker, which machine
# ----------------------------------------------------

def use_checker(tree):
    """Time the checker of the tree at `tree` (a folder holding its backward-check/): imported from there, and
    its frames counted as the checker's in the breakdown. Before anything imports backward_check."""
    global CHECKER
    CHECKER = tree / "backward-check" / "backward_check"
    sys.path.insert(0, str(tree / "backward-check"))
    os.environ[OTHER_CHECKER] = str(tree)  # for the worker process


def device_name(device):
    return torch.cuda.get_device_name(device) if device.type == "cuda" else \
        f"CPU {platform.processor() or platform.machine()}"


def header(options, device):
    def git(*words):
        try:
            return subprocess.run(["git", "-C", str(REPO), *words], capture_output=True, text=True,
                                  timeout=30).stdout.strip()
        except Exception:  # noqa: BLE001  (a copy of the tree without git)
            return ""
    head = os.environ.get("STAMP_TREE") or git("rev-parse", "--short", "HEAD")
    changed = [line.strip() for line in git("status", "--short", "backward-check").splitlines()]
    try:
        import stamp
        checker = stamp.checker_hash(CHECKER.parent.parent)
    except Exception:  # noqa: BLE001
        checker = "unknown"
    where = device_name(device)
    return [
        (f"tree: {head}" + (f" with uncommitted changes in backward-check/: {', '.join(changed)}" if changed else
                            " (backward-check/ as committed)") if head and not os.environ.get("STAMP_TREE") else
         f"tree: {head or 'unknown (no git history here: set STAMP_TREE)'}") + f"; checker hash {checker} "
        f"(tools/stamp.py: sha256 of the checker's files)"
        + ("" if CHECKER.is_relative_to(REPO / "backward-check") else
           f"; the checker timed is not this tree's but the one in {CHECKER.parent.parent.name}/ (--checker)"),
        f"machine: {os.cpu_count()} CPUs, torch.get_num_threads() {torch.get_num_threads()}, {where}, "
        f"load average {os.getloadavg()[0]:.1f} at the start, "
        f"{platform.system()} {platform.machine()}; python {platform.python_version()}, torch {torch.__version__}",
        f"command: {''.join(f'{k}={os.environ[k]} ' for k in ('OMP_NUM_THREADS', 'MKL_NUM_THREADS') if k in os.environ)}"
        f"python benchmarks/check_cost.py {' '.join(sys.argv[1:])}",
    ]


# %%
# The run
# -------
# Sizes outer, kinds inner: the small sizes of every kind come first, so that a run cut short by --max-minutes
# still has them all. The worker is started once, before the first size (its start is timed apart).

def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--sizes", nargs="+", default=None, help="elements of each op's first input "
                        "(default: 1e3 1e4 1e5 1e6)")
    parser.add_argument("--kinds", nargs="+", default=list(DEFAULT_KINDS), choices=list(KINDS))
    parser.add_argument("--repeat", type=int, default=10, help="timings of the op, of which the best counts")
    parser.add_argument("--check-repeat", type=int, default=1, help="timings of each check, of which the best "
                        "counts (more than 1 steadies an A/B of small sizes, where one check takes milliseconds)")
    parser.add_argument("--out", type=Path, help="also write everything printed here")
    parser.add_argument("--no-fd", action="store_true", help="leave out the check without a reference")
    parser.add_argument("--no-plugin", action="store_true", help="leave out the plugin's round trip")
    parser.add_argument("--no-breakdown", action="store_true", help="leave out the profiled runs")
    parser.add_argument("--breakdown-max", type=float, default=math.inf,
                        help="profile only sizes up to this many elements")
    parser.add_argument("--max-minutes", type=float, default=math.inf,
                        help="start no new (size, kind) after this many minutes; those left are listed as left out")
    parser.add_argument("--top", type=int, default=6, help="items in each line of the breakdown")
    parser.add_argument("--checker", type=Path, help="a folder holding another tree's backward-check/ (`git archive "
                        "REV backward-check | tar -x -C DIR`), whose checker to time instead of this tree's: run once "
                        "with it and once without, in turns, for an A/B of two checkers")
    options = parser.parse_args()
    if options.checker is not None:
        if not (options.checker / "backward-check" / "backward_check").is_dir():
            parser.error(f"--checker {options.checker}: no backward-check/backward_check/ in it")
        use_checker(options.checker.resolve())
    try:
        sizes = []
        for given in options.sizes or ["1e3", "1e4", "1e5", "1e6"]:
            try:
                sizes.append(float(given))
            except ValueError:
                raise ValueError(f"--sizes: {given!r} is not a count of elements (as 1e3 or 4096)") from None
        if not all(1 <= s < math.inf for s in sizes):
            raise ValueError(f"--sizes: each size is a count of elements, 1 or more, not "
                             f"{next(s for s in sizes if not 1 <= s < math.inf):g}")
        sizes = [int(s) for s in sizes]
        for name, value, least in (("--repeat", options.repeat, 1), ("--check-repeat", options.check_repeat, 1),
                                   ("--top", options.top, 1),
                                   ("--max-minutes", options.max_minutes, 0),
                                   ("--breakdown-max", options.breakdown_max, 0)):
            if not value >= least:
                raise ValueError(f"{name} must be {least} or more, not {value:g}")
        try:
            device = torch.device(options.device)
        except RuntimeError as error:
            raise ValueError(f"--device {options.device}: {str(error).splitlines()[0]}") from error
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("no CUDA GPU")
        if device.type not in ("cpu", "cuda"):
            raise ValueError(f"--device {options.device}: the benchmark times the CPU or a CUDA GPU")
        if options.out:  # written line by line, so that a run cut short leaves what it measured
            options.out.parent.mkdir(parents=True, exist_ok=True)
            options.out.write_text("")
    except (ValueError, OSError) as error:
        parser.print_usage(sys.stderr)
        print(f"check_cost.py: {error}", file=sys.stderr)
        return 2
    from backward_check import DEVICE, check_backward
    if DEVICE != device:
        print(f"note: the checker puts tensors on {DEVICE}; the op is timed on {device}")

    def say(line=""):
        print(line, flush=True)
        if options.out:
            with options.out.open("a") as out:
                out.write(line + "\n")

    for line in header(options, device):
        say(line)
    modes = ["ref"] + ([] if options.no_fd else ["fd"])
    say(f"sizes: {' '.join(f'{s:.0e}' for s in sizes)}; kinds: {', '.join(options.kinds)}; one check of each, "
        f"after one warm-up check of softplus at 1e3 in each mode for the whole run")
    began = time.perf_counter()
    # A process's first check of each mode pays once what every later one is spared (the checker's imports, the
    # kernels finite differences call in float64): a warm-up of each mode, so that the first kind measured is
    # timed as the others are.
    torch.manual_seed(0)
    warm, _ = KINDS["softplus"][2](1000, device)
    for reference in [F.softplus] + ([] if options.no_fd else [None]):
        check_backward(Softplus, *warm, reference=reference)
    worker = None
    if not options.no_plugin:
        from backward_check.plugin.worker import Worker
        worker = Worker(timeout=600.0)
        start = time.perf_counter()
        worker._started()
        say(f"the plugin's worker process started in {time.perf_counter() - start:.2f} s "
            f"(once a session, and again after a fault; not in the ratios below)")
        # The worker's first check pays the same once, in its own process: timed, said, and left out as its start is.
        first, _, _ = plugin_seconds(worker, Softplus, warm)
        say(f"its first check (softplus, 1e3, the warm-up) took {first:.3f} s (once a session; not in the ratios)")
    ratios = collections.defaultdict(dict)   # (size, mode) -> {kind: ratio}
    skipped = []
    try:
        for n in sizes:
            for kind in options.kinds:
                if (time.perf_counter() - began) / 60 > options.max_minutes:
                    skipped.append(f"{kind} {n:.0e} (past --max-minutes {options.max_minutes:g})")
                    continue
                try:
                    measure_kind(kind, n, device, modes, worker, options, ratios, say)
                except torch.cuda.OutOfMemoryError as error:  # the op itself, or its copies, past the device's memory
                    say(f"{kind} at {n:.0e} elements: out of memory ({str(error).splitlines()[0][:160]}); left out")
                    skipped.append(f"{kind} {n:.0e} (out of memory)")
                if device.type == "cuda":
                    torch.cuda.empty_cache()
    finally:
        if worker is not None:
            worker.stop()
    summary(sizes, modes, worker, ratios, skipped, options, device, began, say)
    return 0


def measure_kind(kind, n, device, modes, worker, options, ratios, say):
    """One kind at one size: the op's own forward + backward, then each check, their rows said and their ratios
    filed in ratios."""
    fn, reference, make, what = KINDS[kind]
    torch.manual_seed(0)
    args, extra = make(n, device)
    first = args[0]
    op = op_seconds(fn, args, options.repeat)
    say()
    say(f"{kind} ({what}), {first.numel():,} elements in {tuple(first.shape)}: "
        f"op forward+backward {op * 1e3:.3f} ms (best of {options.repeat})")
    rows = []
    for mode in modes:
        try:
            took, verdict, calls, spent, per_check, _ = check_seconds(
                fn, args, extra, reference if mode == "ref" else None)
            for _ in range(options.check_repeat - 1):  # the best of several, each its verdict the same
                again, verdict_again, *_ = check_seconds(fn, args, extra, reference if mode == "ref" else None)
                if verdict_again != verdict:
                    raise RuntimeError(f"the check's verdict changed between timings: {verdict} / {verdict_again}")
                took = min(took, again)
        except Exception as error:  # noqa: BLE001  (out of memory, say: a row that says so)
            say(f"  {mode:<6} failed: {type(error).__name__}: {str(error)[:160]}")
            continue
        n_fwd = sum(c for k, c in calls.items() if k[2] == "forward")
        n_bwd = sum(c for k, c in calls.items() if k[2] == "backward")
        rows.append((mode, took, f"{n_fwd} forwards, {n_bwd} backwards of the op "
                                 f"({(n_fwd + n_bwd) / 2:,.0f} op steps' worth)  {verdict}"))
        if not options.no_breakdown and n <= options.breakdown_max:
            _, _, calls, spent, per_check, profiler = check_seconds(
                fn, args, extra, reference if mode == "ref" else None, profile=True)
            rows.append((None, None, breakdown(profiler, spent, calls, per_check, options.top)))
            del profiler
    if worker is not None:
        try:
            took, recorded, verdict = plugin_seconds(worker, fn, args)
            for _ in range(options.check_repeat - 1):
                took = min(took, plugin_seconds(worker, fn, args)[0])
            rows.append(("plugin", took, f"(recording {recorded:.3f} s; the rest the worker's round "
                                         f"trip)  {verdict[:80]}"))
        except Exception as error:  # noqa: BLE001
            say(f"  plugin failed: {type(error).__name__}: {str(error)[:160]}")
    # The op again, after the checks: on a shared machine one burst of load can slow a best of
    # ten; the best of both is the op's cost.
    again = op_seconds(fn, args, options.repeat)
    say(f"  the op again after the checks: {again * 1e3:.3f} ms; the ratios use the best, "
        f"{min(op, again) * 1e3:.3f} ms")
    op = min(op, again)
    for mode, took, words in rows:
        if mode is None:
            for line in words:
                say(line)
            continue
        ratios[(n, mode)][kind] = took / op
        say(f"  {mode:<6} {took:8.3f} s  {took / op:10,.0f}x the op   {words}")
    del args


# %%
# The summary: the median and the worst ratio over kinds, per size
# ----------------------------------------------------------------

def summary(sizes, modes, worker, ratios, skipped, options, device, began, say):
    """The median and worst ratio of each size and mode, what was left out and why, and the run's minutes."""
    say()
    best = f" (the best of {options.check_repeat})" if options.check_repeat > 1 else ""
    say(f"summary on {device.type} ({device_name(device)}): check seconds{best} "
        f"/ the op's forward+backward seconds, over kinds {', '.join(options.kinds)}")
    say(f"  {'size':>6}  {'mode':<7} {'median':>10} {'worst':>10}  worst kind     kinds")
    for n in sizes:
        for mode in modes + ([] if worker is None else ["plugin"]):
            got = ratios.get((n, mode))
            if not got:
                continue
            worst = max(got, key=got.get)
            say(f"  {n:>6.0e}  {mode:<7} {statistics.median(got.values()):>10,.0f} {got[worst]:>10,.0f}  "
                f"{worst:<14} {len(got)}")
    say("  goal: median at most 100, worst at most 300")
    if skipped:
        say(f"left out: {', '.join(skipped)}")
    say(f"run took {(time.perf_counter() - began) / 60:.1f} min")


if __name__ == "__main__":
    # The ops are taken from this file imported as a module (check_cost), not from __main__: the plugin's worker
    # process finds an op again by its module and name, which __main__ would not give it.
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import check_cost
    sys.exit(check_cost.main())
