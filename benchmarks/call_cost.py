"""
What a call costs: from a bare Triton launch to a registered op, per call
=========================================================================

The bandwidth benchmark times kernels with triton.testing.do_bench, which flushes the L2
cache before every call. While the flush runs on the GPU, the next launch is queued, so
the CPU time of a call is hidden. A model does not flush between its ops. This times each
rung of the ladder both ways:

  loop      N calls, then one torch.cuda.synchronize(); the minimum over 5 loops, per call
  do_bench  triton.testing.do_bench's median (L2 flushed before each call)

The rungs, on 2**10 to 2**26 elements, fp32 and bf16:

  F.gelu                          PyTorch's own, forward, and forward + backward (autograd.grad)
  bare launch                     gelu_forward_kernel[grid](x, out, n, BLOCK=...), out allocated once
  launch helper                   hardened_ops.launch_forward: checks, empty_like, the launch
  Function, no grad               TritonGELU.apply(x) under torch.no_grad()
  Function, forward + backward    TritonGELU through autograd.grad
  the book's Function             04_standalone_complete.py's TritonGELU (it records each call)
  gelu(), no grad                 hardened_ops.gelu: the kernel alone, no Function
  triton_op                       extras/triton_op.py's chapter17::gelu, forward + backward
  define/impl op                  torch.library define/impl ops inside an autograd.Function
each of the hardened rungs with the ordinary kernel[grid](...) launch and with the lean
launch (hardened_ops.py's cached compiled kernel). Then, at 2**10 fp32 only:

  CUDA graph, op                  torch.cuda.make_graphed_callables of the op alone, forward + backward
  CUDA graph, MLP block           the same for extras/train_mlp.py's block, nn.GELU against TritonGELU
  reduce-overhead, MLP block      torch.compile(mode="reduce-overhead") of the block, a training step
  one engine thread               forward + backward with torch.autograd.set_multithreading_enabled(False)
  profile                         cProfile of TritonGELU forward + backward, ordinary and lean

    python benchmarks/call_cost.py                 # on a CUDA GPU: table, CSV, Markdown, PNG, profile
    python benchmarks/call_cost.py --dry-run       # anywhere: tiny sizes, few calls, a temporary folder

Without a GPU (and without --dry-run) it exits 2.
"""
import argparse
import cProfile
import csv
import importlib.util
import io
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from plotting import pyplot_or_none  # benchmarks/plotting.py, beside this file

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
FIELDS = ["device", "torch", "triton", "dtype", "n", "rung", "launch", "loop_us", "do_bench_us", "ratio_to_f_gelu"]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log2", default="10,16,20,24,26", help="sizes, as powers of two (default 10,16,20,24,26)")
    parser.add_argument("--dtypes", default="fp32,bf16", help="fp32, bf16 (default both)")
    parser.add_argument("--dry-run", action="store_true", help="2**4 and 2**6 elements, 3 calls a loop: runs anywhere")
    parser.add_argument("--label", default=None, help="names the result files (default h200; dry-run for --dry-run)")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for call_cost_LABEL.csv, .md, .png (default benchmarks/results)")
    args = parser.parse_args(argv)
    try:
        args.sizes = [2 ** int(v) for v in args.log2.split(",")]
    except ValueError:
        parser.error(f"--log2 takes comma-separated whole numbers, not {args.log2!r}")
    args.dtypes = args.dtypes.split(",")
    unknown = [d for d in args.dtypes if d not in ("fp32", "bf16")]
    if unknown:
        parser.error(f"unknown dtype(s) {unknown}: choose from fp32, bf16")
    if args.dry_run:
        args.sizes, args.label = [2**4, 2**6], args.label or "dry-run"
        args.out = args.out or Path(tempfile.mkdtemp(prefix="call_cost_dry_run_"))
    args.label = args.label or "h200"
    args.out = args.out or REPO / "benchmarks" / "results"
    return args


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------
# Timing: a steady-state loop, and do_bench beside it
# ---------------------------------------------------------------------------

def synchronize():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def loop_time(call, calls, loops=5):
    """Seconds a call: N calls, one synchronize, the minimum over `loops` loops."""
    call()
    synchronize()
    best = float("inf")
    for _ in range(loops):
        started = time.perf_counter()
        for _ in range(calls):
            call()
        synchronize()
        best = min(best, (time.perf_counter() - started) / calls)
    return best


def interleaved_time(ops, call, calls, lean, rounds=3):
    """loop_time of call on the given launch path, in rounds that alternate with the other path's
    loop of the same call: drift on a shared machine then weighs on both paths alike."""
    best = float("inf")
    for _ in range(rounds):
        with ops.launch_path(lean=lean):
            best = min(best, loop_time(call, calls, loops=2))
        with ops.launch_path(lean=not lean):
            loop_time(call, calls, loops=1)
    return best


def calls_for(call, dry_run):
    """Enough calls for a loop of about 20 ms."""
    if dry_run:
        return 3
    once = loop_time(call, 3, loops=1)
    return max(10, min(2000, int(0.02 / max(once, 1e-7))))


def bench_time(call, dry_run):
    if dry_run or not torch.cuda.is_available():
        return float("nan")
    from triton.testing import do_bench
    return do_bench(call, warmup=10, rep=50) * 1e-3


# ---------------------------------------------------------------------------
# The rungs
# ---------------------------------------------------------------------------

def forward_backward(op, x, g):
    """One forward and backward of op at x under g, as torch.autograd.grad runs it."""
    def call():
        leaf = x.detach().requires_grad_(True)
        torch.autograd.grad(op(leaf), leaf, g)
    return call


def no_grad(op, x):
    def call():
        with torch.no_grad():
            op(x)
    return call


def define_impl_op(ops):
    """GELU as torch.library define/impl ops (no Python autograd registration), with a plain
    autograd.Function outside calling them: the low-level form, without custom_op's wrappers."""
    library = torch.library.Library("chapter17_call_cost", "DEF")
    library.define("gelu(Tensor x) -> Tensor")
    library.define("gelu_backward(Tensor grad_output, Tensor x) -> Tensor")
    backend = "CUDA" if ops.DEVICE.type == "cuda" else "CPU"
    library.impl("gelu", lambda x: ops.launch_forward(ops.gelu_forward_kernel, x), backend)
    library.impl("gelu_backward", lambda g, x: ops.launch_backward(ops.gelu_backward_kernel, g, x), backend)
    forward, backward = torch.ops.chapter17_call_cost.gelu.default, torch.ops.chapter17_call_cost.gelu_backward.default

    class DefineImplGELU(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return forward(x)

        @staticmethod
        def backward(ctx, grad_output):
            x, = ctx.saved_tensors
            return backward(grad_output, x)

    return library, DefineImplGELU  # the library must stay alive while the ops are used


def rungs(ops, book, triton_op, define_impl, x, g):
    """(rung, launch, call) for one size and dtype."""
    import torch.nn.functional as F
    import triton
    out = torch.empty_like(x)
    n, block = x.numel(), ops.block_for(x)
    grid = (triton.cdiv(n, block),)
    yield "F.gelu, forward", "-", lambda: F.gelu(x)
    yield "F.gelu, forward + backward", "-", forward_backward(F.gelu, x, g)
    yield "bare launch", "ordinary", lambda: ops.gelu_forward_kernel[grid](x, out, n, BLOCK=block)
    for launch in ("ordinary", "lean"):
        yield "launch helper", launch, lambda: ops.launch_forward(ops.gelu_forward_kernel, x)
        yield "Function, no grad", launch, no_grad(ops.TritonGELU.apply, x)
        yield "gelu(), no grad", launch, no_grad(ops.gelu, x)
        yield "Function, forward + backward", launch, forward_backward(ops.TritonGELU.apply, x, g)
        if triton_op is not None:
            yield "triton_op, forward + backward", launch, forward_backward(triton_op.gelu, x, g)
        yield "define/impl op, forward + backward", launch, forward_backward(define_impl.apply, x, g)
    if x.dtype == torch.float32:  # the book's kernels take fp32 only
        book_call = forward_backward(book.TritonGELU.apply, x, g)

        def book_step():
            book_call()
            book.captured_grads.clear()  # it keeps a copy of every grad_output it receives
            book.call_order.clear()
        yield "the book's Function, forward + backward", "ordinary", book_step


def measure_rungs(args, ops, book, triton_op, define_impl, device_name, versions):
    rows = []
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    for dtype_name in args.dtypes:
        for n in args.sizes:
            generator = torch.Generator().manual_seed(n)
            x = torch.randn(n, generator=generator).to(ops.DEVICE, dtypes[dtype_name])
            g = torch.randn(n, generator=generator).to(ops.DEVICE, dtypes[dtype_name])
            reference = {}
            for rung, launch, call in rungs(ops, book, triton_op, define_impl, x, g):
                with ops.launch_path(lean=launch == "lean"):
                    calls = calls_for(call, args.dry_run)
                    benched = bench_time(call, args.dry_run)
                seconds = interleaved_time(ops, call, calls, lean=launch == "lean")
                if rung.startswith("F.gelu"):
                    reference["forward" if rung.endswith("forward") else "backward"] = seconds
                base = reference["backward" if "backward" in rung else "forward"]
                rows.append(dict(zip(FIELDS, [device_name, *versions, dtype_name, n, rung, launch,
                                              f"{seconds * 1e6:.2f}", f"{benched * 1e6:.2f}",
                                              f"{seconds / base:.3f}"])))
                print(f"{dtype_name:>5} 2**{n.bit_length() - 1:<3} {rung:<42} {launch:>8} {seconds * 1e6:>10.2f} us "
                      f"{benched * 1e6:>10.2f} us (do_bench) {seconds / base:>7.2f}x", flush=True)
    return rows


# ---------------------------------------------------------------------------
# At the smallest size: CUDA graphs, compile, the engine's thread, a profile
# ---------------------------------------------------------------------------

def graphs_and_compile(ops, train_mlp, dry_run):
    """(what, us a call) for the whole-graph rungs; on the GPU only."""
    results = []
    if ops.DEVICE.type != "cuda":
        return results
    x = torch.randn(1024, device="cuda")
    for name, module in (("F.gelu", torch.nn.GELU(approximate="none")), ("TritonGELU", ops.TritonGELUModule())):
        graphed = torch.cuda.make_graphed_callables(module, (x.clone().requires_grad_(True),))
        g = torch.randn(1024, device="cuda")

        def step(graphed=graphed):
            leaf = x.detach().requires_grad_(True)
            torch.autograd.grad(graphed(leaf), leaf, g)
        results.append((f"CUDA graph of the op alone, forward + backward: {name}", loop_time(step, 200)))
    batch = torch.randn(64, 256, device="cuda")
    target = torch.randn(64, 256, device="cuda")
    for name in ("nn.GELU", "TritonGELU"):
        torch.manual_seed(0)
        block = train_mlp.mlp_block(name).cuda()
        graphed = torch.cuda.make_graphed_callables(block, (batch.clone(),))

        def step(graphed=graphed):
            torch.nn.functional.mse_loss(graphed(batch), target).backward()
        results.append((f"CUDA graph of the MLP block (64 x 256), forward + backward: {name}", loop_time(step, 200)))

        eager_block = train_mlp.mlp_block(name).cuda()

        def eager_step(eager_block=eager_block):
            eager_block.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(eager_block(batch), target).backward()
        results.append((f"the MLP block eager, forward + backward: {name}", loop_time(eager_step, 200)))

        compiled = torch.compile(train_mlp.mlp_block(name).cuda(), mode="reduce-overhead")

        def compiled_step(compiled=compiled):
            torch.compiler.cudagraph_mark_step_begin()  # each step's outputs are the graph's own buffers,
            compiled.zero_grad(set_to_none=True)  # and .grad would accumulate into last step's, overwritten
            torch.nn.functional.mse_loss(compiled(batch), target).backward()
        for _ in range(3):  # compile and record the graph
            compiled_step()
        results.append((f"torch.compile(mode='reduce-overhead') of the MLP block, forward + backward: {name}",
                        loop_time(compiled_step, 200)))
    return results


def one_engine_thread(ops, x, g):
    """(what, us) for forward + backward with the engine's device threads on, and off."""
    import torch.nn.functional as F
    results = []
    for threads in (True, False):
        torch.autograd.set_multithreading_enabled(threads)
        try:
            for name, op, lean in (("F.gelu", F.gelu, False), ("TritonGELU, ordinary launch", ops.TritonGELU.apply, False),
                                   ("TritonGELU, lean launch", ops.TritonGELU.apply, True)):
                call = forward_backward(op, x, g)
                with ops.launch_path(lean=lean):
                    results.append((f"{name}, forward + backward, engine threads {'on' if threads else 'off'}",
                                    loop_time(call, calls_for(call, False))))
        finally:
            torch.autograd.set_multithreading_enabled(True)
    return results


def profile(ops, x, g, calls):
    """cProfile of TritonGELU forward + backward, ordinary and lean: where the microseconds go."""
    text = []
    for launch in ("ordinary", "lean"):
        call = forward_backward(ops.TritonGELU.apply, x, g)
        with ops.launch_path(lean=launch == "lean"):
            call()
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(calls):
                call()
            synchronize()
            profiler.disable()
        stream = io.StringIO()
        pstats.Stats(profiler, stream=stream).sort_stats("tottime").print_stats(12)
        text.append(f"--- cProfile, {calls} TritonGELU forward + backward calls, {launch} launch (tottime order)\n"
                    + stream.getvalue().split("\n", 4)[-1])
    return "\n".join(text)


# ---------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------

def crossover(rows, dtype):
    """The smallest n at which the lean Function's forward + backward is within 5% of F.gelu's."""
    for row in rows:
        if (row["dtype"] == dtype and row["rung"] == "Function, forward + backward" and row["launch"] == "lean"
                and float(row["ratio_to_f_gelu"]) <= 1.05):
            return int(row["n"])
    return None


def summary(rows, whole_graph, args):
    sizes = sorted({int(r["n"]) for r in rows})
    lines = ["| dtype | rung | launch | " + " | ".join(f"2**{n.bit_length() - 1}" for n in sizes) + " |",
             "|---|---|---|" + "---|" * len(sizes)]
    keys = list(dict.fromkeys((r["dtype"], r["rung"], r["launch"]) for r in rows))
    for dtype, rung, launch in keys:
        cells = []
        for n in sizes:
            row = next((r for r in rows if (r["dtype"], r["rung"], r["launch"], int(r["n"])) == (dtype, rung, launch, n)),
                       None)
            cells.append("" if row is None else f"{float(row['loop_us']):.1f} us ({float(row['ratio_to_f_gelu']):.2f}x)")
        lines.append(f"| {dtype} | {rung} | {launch} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Loop timing, per call; in parentheses, against F.gelu's forward (for forward-only rungs) or "
                 "forward + backward.")
    for dtype in args.dtypes:
        found = crossover(rows, dtype)
        lines.append(f"Crossover ({dtype}): the lean Function's forward + backward is within 5% of F.gelu's from "
                     + (f"2**{found.bit_length() - 1} elements" if found else "none of the sizes measured"))
    if whole_graph:
        lines += ["", "| at 2**10 fp32, or the MLP block | us a call |", "|---|---|"]
        lines += [f"| {what} | {seconds * 1e6:.1f} |" for what, seconds in whole_graph]
    return "\n".join(lines) + "\n"


def plot(rows, path):
    plt = pyplot_or_none(path)
    if plt is None:
        return
    figure, axes = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
    for ax, dtype in zip(axes, ("fp32", "bf16")):
        for rung, launch in dict.fromkeys((r["rung"], r["launch"]) for r in rows if "backward" in r["rung"]):
            points = [(int(r["n"]), float(r["loop_us"])) for r in rows
                      if (r["dtype"], r["rung"], r["launch"]) == (dtype, rung, launch)]
            if points:
                ax.plot(*zip(*points), marker="o", label=f"{rung}" + ("" if launch == "-" else f" ({launch})"))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"forward + backward, {dtype}: microseconds a call (loop timing)")
        ax.set_xlabel("elements")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("us a call")
    axes[1].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    print(f"plot written to {path}", file=sys.stderr)


def main(argv=None):
    args = parse_args(argv)
    import hardened_ops as ops
    if ops.DEVICE.type != "cuda" and not args.dry_run:
        print("call_cost.py needs a CUDA GPU: what it measures is the CPU time of GPU launches. "
              "--dry-run runs a tiny version anywhere.", file=sys.stderr)
        return 2
    import triton
    book = load("call_cost_book", REPO / "04_standalone_complete.py")
    train_mlp = load("call_cost_train_mlp", REPO / "extras" / "train_mlp.py")
    triton_op = load("call_cost_triton_op", REPO / "extras" / "triton_op.py") if hasattr(torch.library, "triton_op") \
        else None
    library, define_impl = define_impl_op(ops)
    device_name = torch.cuda.get_device_name() if ops.DEVICE.type == "cuda" else "CPU, Triton interpreter"
    versions = (torch.__version__, triton.__version__)
    print(f"{device_name}, torch {versions[0]}, triton {versions[1]}; lean launch: "
          f"{'available' if ops.LEAN_LAUNCH_AVAILABLE else 'not available (' + ops.LEAN_LAUNCH_OFF_BECAUSE + ')'}")
    rows = measure_rungs(args, ops, book, triton_op, define_impl, device_name, versions)
    whole_graph = []
    if ops.DEVICE.type == "cuda" and not args.dry_run:
        x = torch.randn(1024, device="cuda")
        g = torch.randn(1024, device="cuda")
        whole_graph = graphs_and_compile(ops, train_mlp, args.dry_run) + one_engine_thread(ops, x, g)
        for what, seconds in whole_graph:
            print(f"{what}: {seconds * 1e6:.1f} us")
        print(profile(ops, x, g, 2000))
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / f"call_cost_{args.label}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    text = summary(rows, whole_graph, args)
    (args.out / f"call_cost_{args.label}.md").write_text(text)
    print(text)
    plot(rows, args.out / f"call_cost_{args.label}.png")
    print(f"wrote {args.out / f'call_cost_{args.label}.csv'} and .md, .png")
    del library
    return 0


if __name__ == "__main__":
    sys.exit(main())
