"""
GELU bandwidth: the Triton kernels against PyTorch and a plain copy
===================================================================

GELU reads and writes each element once (the backward reads two tensors and
writes one) and does a few dozen flops per element, so it is memory-bound: its
honest figure is bytes moved per second, against what a device-to-device copy
achieves on the same card.

Cases, each timed with triton.testing.do_bench (median, L2 flushed between runs):
  copy             dst.copy_(x)                                   2 N bytes-per-element moved
  triton forward   the file's gelu_forward_kernel launch          2 N
  torch forward    torch.nn.functional.gelu                        2 N
  triton backward  the file's gelu_backward_kernel launch         3 N
  torch backward   torch.ops.aten.gelu_backward                   3 N

Run on a CUDA GPU:
  python benchmarks/gelu_bandwidth.py                    # hardened_ops.py, 2**16 .. 2**30, fp32 and bf16
  python benchmarks/gelu_bandwidth.py --script listings/04_standalone_complete.py --dtypes fp32 --label listing

It prints a table and writes a CSV and a PNG plot (GB/s against size) to --out.
"""
import argparse
import os
import csv
import importlib.util
import sys
from pathlib import Path

import torch
from plotting import pyplot_or_none  # benchmarks/plotting.py, beside this file

REPO = Path(__file__).resolve().parent.parent
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
CASES = ("copy", "triton forward", "torch forward", "triton backward", "torch backward")
TENSORS_MOVED = {"copy": 2, "triton forward": 2, "torch forward": 2, "triton backward": 3, "torch backward": 3}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--script", type=Path, default=REPO / "hardened_ops.py",
                        help="the file whose kernels are timed (default: hardened_ops.py)")
    parser.add_argument("--min-log2", type=int, default=16, help="smallest size, as a power of two (default 16)")
    parser.add_argument("--max-log2", type=int, default=30, help="largest size, as a power of two (default 30)")
    parser.add_argument("--dtypes", default="fp32,bf16", help=f"comma-separated, of {', '.join(DTYPES)} (default fp32,bf16)")
    parser.add_argument("--block", type=int, default=None,
                        help="elements a program (the launch helpers' BLOCK); default: theirs, 4 KiB a program")
    parser.add_argument("--label", default="hardened", help="names this run in the CSV (default: hardened)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results",
                        help="folder for gelu_bandwidth.csv and gelu_bandwidth.png (default benchmarks/results)")
    args = parser.parse_args()
    if not 1 <= args.min_log2 <= args.max_log2 <= 33:
        parser.error("need 1 <= --min-log2 <= --max-log2 <= 33")
    unknown = [d for d in args.dtypes.split(",") if d not in DTYPES]
    if unknown:
        parser.error(f"unknown dtype(s) {unknown}; choose from {list(DTYPES)}")
    if not args.script.is_file() or args.script.suffix != ".py":
        parser.error(f"--script {args.script}: {'not a .py file' if args.script.is_file() else 'no such file'} (give "
                     f"hardened_ops.py, or one of the four scripts)")
    if args.block is not None and (args.block < 1 or args.block & (args.block - 1)):
        parser.error(f"--block {args.block}: a program's elements are a power of two (tl.arange needs one)")
    return args


def load_kernels(script_path, block=None):
    """The script's forward and backward launches, as functions of (x) and (grad_output, x);
    block, if given, is passed to the launch helpers as their BLOCK."""
    spec = importlib.util.spec_from_file_location("benchmarked_script", script_path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    if hasattr(script, "launch_forward"):  # hardened_ops.py
        return (lambda x: script.launch_forward(script.gelu_forward_kernel, x, BLOCK=block),
                lambda g, x: script.launch_backward(script.gelu_backward_kernel, g, x, BLOCK=block))
    block = block or 1024  # the listings' helpers take BLOCK=1024 as their default, not None
    if hasattr(script, "_launch"):  # 02 and 04
        return (lambda x: script._launch(script.gelu_forward_kernel, x, BLOCK=block),
                lambda g, x: script._launch_bwd(script.gelu_backward_kernel, g, x, BLOCK=block))
    if hasattr(script, "triton_gelu_backward"):  # 03
        return (lambda x: script.triton_gelu_forward(x, BLOCK=block),
                lambda g, x: script.triton_gelu_backward(g, x, BLOCK=block))
    return (lambda x: script.triton_gelu_forward(x, BLOCK=block),  # 01
            lambda g, x: script._launch_bwd(script.gelu_backward_kernel, g, x, BLOCK=block))


def time_cases(triton_forward, triton_backward, n, dtype):
    """Median milliseconds of each case on n elements."""
    from triton.testing import do_bench

    generator = torch.Generator(device="cuda").manual_seed(n)
    x = torch.randn(n, device="cuda", dtype=dtype, generator=generator)
    grad_output = torch.randn(n, device="cuda", dtype=dtype, generator=generator)
    copy_destination = torch.empty_like(x)
    # A kernel that runs is not a kernel that is right: check before timing.
    torch.testing.assert_close(triton_forward(x), torch.nn.functional.gelu(x))
    torch.testing.assert_close(triton_backward(grad_output, x), torch.ops.aten.gelu_backward(grad_output, x))
    runs = {
        "copy": lambda: copy_destination.copy_(x),
        "triton forward": lambda: triton_forward(x),
        "torch forward": lambda: torch.nn.functional.gelu(x),
        "triton backward": lambda: triton_backward(grad_output, x),
        "torch backward": lambda: torch.ops.aten.gelu_backward(grad_output, x),
    }
    return {case: do_bench(run, warmup=25, rep=100, return_mode="median") for case, run in runs.items()}


def plot(rows, path):
    plt = pyplot_or_none(path)
    if plt is None:
        return
    dtypes = list(dict.fromkeys(r["dtype"] for r in rows))
    figure, axes = plt.subplots(1, len(dtypes), figsize=(6.5 * len(dtypes), 4.5), squeeze=False, sharey=True)
    for ax, dtype in zip(axes[0], dtypes):
        for case in CASES:
            points = [(r["n"], r["gb_per_s"]) for r in rows if r["dtype"] == dtype and r["case"] == case]
            ax.plot(*zip(*points), marker="o", markersize=3, label=case,
                    linestyle="--" if case == "copy" else "-", color="black" if case == "copy" else None)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("elements")
        ax.set_title(f"GELU, {dtype}, {rows[0]['device']}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("GB/s (bytes read + written)")
    axes[0][-1].legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    print(f"wrote {path}")


def summarize(rows, from_log2=26):
    """A markdown table of the figures the targets are about: at n >= 2**from_log2, the worst
    ratio of each Triton case to the copy and to PyTorch's own op, and GB/s at the largest n."""
    lines = [f"| dtype | case | GB/s at n = 2^{{log2}} | worst vs copy (n >= 2^{from_log2}) | worst vs PyTorch (n >= 2^{from_log2}) |",
             "|---|---|---|---|---|"]
    by_key = {(r["dtype"], r["n"], r["case"]): r["gb_per_s"] for r in rows}
    for dtype in dict.fromkeys(r["dtype"] for r in rows):
        sizes = sorted({r["n"] for r in rows if r["dtype"] == dtype and r["n"] >= 2**from_log2})
        if not sizes:
            continue
        for case, torch_case in (("triton forward", "torch forward"), ("triton backward", "torch backward")):
            vs_copy = min(by_key[dtype, n, case] / by_key[dtype, n, "copy"] for n in sizes)
            vs_torch = min(by_key[dtype, n, case] / by_key[dtype, n, torch_case] for n in sizes)
            lines.append(f"| {dtype} | {case} | {by_key[dtype, sizes[-1], case]:.0f} | {vs_copy:.3f} | {vs_torch:.3f} |")
        for case in ("copy", "torch forward", "torch backward"):
            lines.append(f"| {dtype} | {case} | {by_key[dtype, sizes[-1], case]:.0f} | | |")
        lines[0] = lines[0].replace("{log2}", str(sizes[-1].bit_length() - 1))
    return "\n".join(lines) + "\n"


def main():
    args = parse_args()
    if not torch.cuda.is_available():
        sys.exit("gelu_bandwidth.py needs a CUDA GPU: it measures memory bandwidth, which the Triton interpreter "
                 "on the CPU says nothing about.")
    import triton

    triton_forward, triton_backward = load_kernels(args.script, args.block)
    device = torch.cuda.get_device_name()
    rows = []
    print(f"{device}, torch {torch.__version__}, triton {triton.__version__}, kernels from {os.path.relpath(args.script)}")
    print(f"{'dtype':>5} {'n':>12} " + " ".join(f"{case:>16}" for case in CASES) + "   (GB/s)")
    for dtype_name in args.dtypes.split(","):
        dtype = DTYPES[dtype_name]
        for log2 in range(args.min_log2, args.max_log2 + 1):
            n = 2**log2
            milliseconds = time_cases(triton_forward, triton_backward, n, dtype)
            line = []
            for case in CASES:
                moved = TENSORS_MOVED[case] * n * dtype.itemsize
                gb_per_s = moved / (milliseconds[case] * 1e-3) / 1e9
                line.append(f"{gb_per_s:16.0f}")
                rows.append(dict(label=args.label, device=device, torch=torch.__version__, triton=triton.__version__,
                                 dtype=dtype_name, n=n, case=case, bytes=moved, ms=milliseconds[case],
                                 gb_per_s=gb_per_s))
            print(f"{dtype_name:>5} {'2^' + str(log2):>12} " + " ".join(line))
            torch.cuda.empty_cache()

    args.out.mkdir(parents=True, exist_ok=True)
    csv_path = args.out / f"gelu_bandwidth_{args.label}.csv"
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {csv_path}")
    plot(rows, args.out / f"gelu_bandwidth_{args.label}.png")
    summary = summarize(rows)
    print(summary)
    (args.out / f"gelu_bandwidth_{args.label}.md").write_text(summary)


if __name__ == "__main__":
    main()
