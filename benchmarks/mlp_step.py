"""
What a custom op costs inside a model: the MLP block's step time and memory
===========================================================================

The GELU bandwidth benchmark times the kernels alone. A reader who swaps nn.GELU for
the chapter's TritonGELU asks something else: does my training step get slower or
heavier? This times extras/train_mlp.py's block (LayerNorm, Linear(d, 4d), GELU,
Linear(4d, d)), alone and as a stack, with three activations:

  nn.GELU      PyTorch's own (approximate="none")
  TritonGELU   the chapter's torch.autograd.Function (hardened_ops.py's, through extras/train_mlp.py)
  triton_op    the same kernels as the chapter17::gelu operator (extras/triton_op.py)
  gelu()       hardened_ops.TritonGELUModule: the Function only where a gradient is wanted

in two modes, eager and torch.compile (default mode), in fp32 and in bf16 under
autocast, for a training step (forward, backward, AdamW) and a forward-only inference
step. Each is timed with triton.testing.do_bench (median of repeated runs after a
warm-up, L2 flushed between runs); peak memory is torch.cuda.max_memory_allocated over
one step. Then torch.profiler counts the kernels one step launches, and names those
that compute GELU or its gradient: under torch.compile, nn.GELU sits inside Inductor's
fused kernels, while the Triton versions stay kernels of their own.

    python benchmarks/mlp_step.py                 # on a CUDA GPU: table, CSV, Markdown, PNG
    python benchmarks/mlp_step.py --dry-run       # anywhere: a tiny model, eager only, written to a temporary folder

Without a GPU (and without --dry-run) it says so and exits 2.
"""
import argparse
import csv
import importlib.util
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from plotting import pyplot_or_none  # benchmarks/plotting.py, beside this file

REPO = Path(__file__).resolve().parent.parent
COMMITTED_RESULTS = REPO / "benchmarks" / "results" / "mlp_step_h200.csv"
ACTIVATIONS = ("nn.GELU", "TritonGELU", "triton_op", "gelu()")
MODES = ("eager", "compile")
DTYPES = ("fp32", "bf16")
STEPS = ("train", "infer")
# (blocks, d): one block at two widths, and a stack of eight.
DEFAULT_MODELS = "1x1024,1x4096,8x1024"
FIELDS = ["device", "torch", "triton", "blocks", "d", "tokens", "dtype", "mode", "step", "activation",
          "ms", "ratio_to_nn_gelu", "peak_mib", "kernels", "gelu_kernels", "gelu_kernel_names"]


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # torch.compile imports a function's module by name
    spec.loader.exec_module(module)
    return module


def parse_models(text):
    models = []
    for item in text.split(","):
        blocks, _, d = item.partition("x")
        if not (blocks.isdigit() and d.isdigit() and int(blocks) > 0 and int(d) > 0):
            raise argparse.ArgumentTypeError(f"models are BLOCKSxD, e.g. 1x4096 or 8x1024; not {item!r}")
        models.append((int(blocks), int(d)))
    return models


def parse_choices(allowed):
    def parse(text):
        chosen = text.split(",")
        unknown = [c for c in chosen if c not in allowed]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {unknown}; choose from {', '.join(allowed)}")
        return chosen
    return parse


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=parse_models, default=parse_models(DEFAULT_MODELS),
                        help=f"BLOCKSxD, comma-separated (default {DEFAULT_MODELS})")
    parser.add_argument("--tokens", type=int, default=8192, help="rows a step (default 8192)")
    parser.add_argument("--activations", type=parse_choices(ACTIVATIONS), default=list(ACTIVATIONS))
    parser.add_argument("--modes", type=parse_choices(MODES), default=list(MODES))
    parser.add_argument("--dtypes", type=parse_choices(DTYPES), default=list(DTYPES))
    parser.add_argument("--steps", type=parse_choices(STEPS), default=list(STEPS))
    parser.add_argument("--no-profile", action="store_true", help="skip the kernel counts")
    parser.add_argument("--explain", action="store_true",
                        help="instead of timing: torch._dynamo.explain of each activation's forward (graphs, breaks)")
    parser.add_argument("--dry-run", action="store_true",
                        help="a tiny model (1x32, 64 tokens), eager, timed with a clock: runs anywhere")
    parser.add_argument("--label", default=None, help="names the result files (default h200; dry-run for --dry-run)")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for mlp_step_LABEL.csv, .md and .png (default benchmarks/results; "
                             "a new temporary folder for --dry-run)")
    args = parser.parse_args(argv)
    if args.tokens < 1:
        parser.error("--tokens must be at least 1")
    if args.dry_run:
        args.models, args.tokens, args.modes = [(1, 32)], 64, ["eager"]
        args.label = args.label or "dry-run"
        args.out = args.out or Path(tempfile.mkdtemp(prefix="mlp_step_dry_run_"))
        if (args.out.resolve() / f"mlp_step_{args.label}.csv") == COMMITTED_RESULTS:
            parser.error(f"--dry-run would overwrite the committed results {COMMITTED_RESULTS.relative_to(REPO)}: "
                         "give it another --label or --out")
    args.label = args.label or "h200"
    args.out = args.out or REPO / "benchmarks" / "results"
    return args


class OperatorActivation(torch.nn.Module):
    def __init__(self, operator):
        super().__init__()
        self.operator = operator

    def forward(self, x):
        return self.operator(x)


def activation(name, extras):
    if name == "nn.GELU":
        return torch.nn.GELU(approximate="none")
    if name == "TritonGELU":
        # train_mlp.py's module, which calls TritonGELU.apply(x). (A module that kept the bound
        # TritonGELU.apply as an attribute instead made torch.compile break the graph around it:
        # "GetAttrVariable(AutogradFunctionVariable(), setup_context) has no type".)
        return extras["train_mlp"].FunctionModule(extras["train_mlp"].TritonGELU)
    if name == "gelu()":
        return extras["train_mlp"].TritonGELUModule()
    return OperatorActivation(extras["triton_op"].gelu)


def mlp(blocks, d, name, extras):
    layers = []
    for _ in range(blocks):
        layers += [torch.nn.LayerNorm(d), torch.nn.Linear(d, 4 * d), activation(name, extras), torch.nn.Linear(4 * d, d)]
    return torch.nn.Sequential(*layers)


def make_step(model, kind, dtype, mode, device, tokens):
    """A function that runs one step: forward, backward and AdamW ("train"), or forward only."""
    forward = torch.compile(model) if mode == "compile" else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    x = torch.randn(tokens, model[0].normalized_shape[0], device=device,
                    generator=torch.Generator(device=device).manual_seed(0))
    autocast = dict(device_type=device.type, dtype=torch.bfloat16, enabled=dtype == "bf16")

    def train():
        with torch.autocast(**autocast):
            loss = forward(x).float().square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def infer():
        with torch.no_grad(), torch.autocast(**autocast):
            forward(x)

    return train if kind == "train" else infer


def clock_ms(step, device, repeats=5):
    """Median milliseconds by the wall clock (the dry run, or a CPU)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def gelu_kernel(name):
    return "gelu" in name.lower()


def short_kernel_name(name):
    """PyTorch's own kernels have C++ template names hundreds of characters long: the functor's name stands in."""
    match = re.search(r"at::native::(\w*Gelu\w*)", name)
    return f"aten {match[1]}" if match else name


def count_kernels(step, device):
    """(every kernel one step launched, the names of those computing GELU or its gradient)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as profile:
        step()
        torch.cuda.synchronize()
    names = [e.name for e in profile.events() if e.device_type == torch.autograd.DeviceType.CUDA
             and not e.name.startswith(("Memcpy", "Memset"))]
    return len(names), sorted({short_kernel_name(n) for n in names if gelu_kernel(n)})


def measure(blocks, d, tokens, name, mode, dtype, kind, extras, device, profile):
    torch.manual_seed(0)
    model = mlp(blocks, d, name, extras).to(device)
    step = make_step(model, kind, dtype, mode, device, tokens)
    step()  # compiles (torch.compile, Triton), allocates optimizer state
    step()
    if device.type == "cuda":
        from triton.testing import do_bench

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() / 2**20
        ms = do_bench(step, warmup=25, rep=200, return_mode="median")
    else:
        peak, ms = float("nan"), clock_ms(step, device)
    # The interpreter launches no GPU kernels: nothing to count there.
    kernels, gelu_names = count_kernels(step, device) if profile and device.type == "cuda" else (float("nan"), [])
    del model, step
    if device.type == "cuda":
        torch.cuda.empty_cache()
    if mode == "compile":
        torch._dynamo.reset()
    return ms, peak, kernels, gelu_names


def explain(blocks, d, tokens, name, dtype, extras, device):
    """(graphs, graph breaks, their reasons) when torch.compile traces the model's forward and loss."""
    torch.manual_seed(0)
    model = mlp(blocks, d, name, extras).to(device)
    x = torch.randn(tokens, d, device=device, generator=torch.Generator(device=device).manual_seed(0))

    def forward_loss(x):
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=dtype == "bf16"):
            return model(x).float().square().mean()

    torch._dynamo.reset()
    report = torch._dynamo.explain(forward_loss)(x)
    reasons = sorted({" ".join(str(r.reason).split())[:200] for r in report.break_reasons})
    torch._dynamo.reset()
    return report.graph_count, report.graph_break_count, reasons


def summarize(rows):
    """Markdown: for each model, dtype and mode, each activation's step time against nn.GELU's."""
    others = " / ".join(ACTIVATIONS)
    lines = [f"| model | dtype | mode | step | nn.GELU ms | TritonGELU | triton_op | gelu() | peak MiB ({others}) "
             f"| kernels a step ({others}) | GELU kernels (TritonGELU) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    groups = {}
    for row in rows:
        key = (row["blocks"], row["d"], row["dtype"], row["mode"], row["step"])
        groups.setdefault(key, {})[row["activation"]] = row
    for (blocks, d, dtype, mode, step), by_name in groups.items():
        base = by_name.get("nn.GELU")
        cell = lambda name, field, fmt: (format(by_name[name][field], fmt) if name in by_name else "")  # noqa: E731
        ratio = lambda name: (f"{by_name[name]['ratio_to_nn_gelu']:.3f}x" if name in by_name else "")  # noqa: E731
        # nn.GELU is timed as the baseline even where --activations leaves it out: its ms from any row's ratio
        any_row = next(iter(by_name.values()))
        base_ms = base["ms"] if base else any_row["ms"] / any_row["ratio_to_nn_gelu"]
        lines.append(
            f"| {blocks}x d={d} | {dtype} | {mode} | {step} | {base_ms:.3f} "
            f"| {ratio('TritonGELU')} | {ratio('triton_op')} | {ratio('gelu()')} "
            f"| {' / '.join(cell(n, 'peak_mib', '.0f') for n in ACTIVATIONS)} "
            f"| {' / '.join(cell(n, 'kernels', '') for n in ACTIVATIONS)} "
            f"| {by_name['TritonGELU']['gelu_kernel_names'] if 'TritonGELU' in by_name else ''} |")
    return "\n".join(lines) + "\n"


def plot(rows, path):
    plt = pyplot_or_none(path)
    if plt is None:
        return
    models = sorted({(r["blocks"], r["d"]) for r in rows})
    steps = [s for s in STEPS if any(r["step"] == s for r in rows)]
    figure, axes = plt.subplots(len(steps), len(models), figsize=(4.2 * len(models), 3.4 * len(steps)),
                                squeeze=False, sharey=True)
    for i, step in enumerate(steps):
        for j, (blocks, d) in enumerate(models):
            ax = axes[i][j]
            groups = [(dt, m) for dt in DTYPES for m in MODES
                      if any(r["dtype"] == dt and r["mode"] == m and r["step"] == step for r in rows)]
            for k, name in enumerate(ACTIVATIONS):
                values = [next((r["ratio_to_nn_gelu"] for r in rows if (r["blocks"], r["d"], r["dtype"], r["mode"],
                                                                         r["step"], r["activation"]) ==
                                (blocks, d, dt, m, step, name)), float("nan")) for dt, m in groups]
                width = 0.8 / len(ACTIVATIONS)
                ax.bar([g + (k - (len(ACTIVATIONS) - 1) / 2) * width for g in range(len(groups))], values, width=width,
                       label=name)
            ax.axhline(1.0, color="black", linewidth=0.8)
            ax.set_xticks(range(len(groups)), [f"{dt}\n{m}" for dt, m in groups])
            ax.set_title(f"{step}: {blocks} block(s), d={d}", fontsize=10)
            if j == 0:
                ax.set_ylabel("step time / nn.GELU's")
    axes[0][0].legend(fontsize=8)
    figure.suptitle(f"MLP block step time relative to nn.GELU ({rows[0]['device']}, {rows[0]['tokens']} tokens)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    print(f"wrote {path}")


def main(argv=None):
    args = parse_args(argv)
    if not torch.cuda.is_available() and not args.dry_run:
        print("mlp_step.py needs a CUDA GPU: step times and memory in the Triton interpreter say nothing about a GPU. "
              "python benchmarks/mlp_step.py --dry-run checks the output on a tiny model anywhere.", file=sys.stderr)
        return 2
    extras = {"train_mlp": load("mlp_step_train_mlp", REPO / "extras/train_mlp.py")}
    if "triton_op" in args.activations:
        extras["triton_op"] = load("mlp_step_triton_op", REPO / "extras/triton_op.py")
    import triton

    device = extras["train_mlp"].DEVICE
    if "compile" in args.modes and device.type != "cuda":
        print("torch.compile needs a GPU here (the interpreter's kernels cannot be compiled)", file=sys.stderr)
        return 2
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU, Triton interpreter"
    if args.explain:
        for blocks, d in args.models:
            for dtype in args.dtypes:
                for name in args.activations:
                    graphs, breaks, reasons = explain(blocks, d, args.tokens, name, dtype, extras, device)
                    print(f"{blocks}x{d} {dtype} {name}: torch.compile traced {graphs} graph(s) with {breaks} "
                          f"graph break(s){': ' + ' | '.join(reasons) if reasons else ''}", flush=True)
        return 0
    print(f"{where}, torch {torch.__version__}, triton {triton.__version__}, {args.tokens} tokens"
          f"{', dry run' if args.dry_run else ''}")
    print(f"{'model':>10} {'dtype':>5} {'mode':>8} {'step':>6} {'activation':>11} {'ms':>10} {'vs nn.GELU':>10} "
          f"{'peak MiB':>9} {'kernels':>8}  GELU kernels")
    rows = []
    args.out.mkdir(parents=True, exist_ok=True)
    csv_path = args.out / f"mlp_step_{args.label}.csv"
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        for blocks, d in args.models:
            for dtype in args.dtypes:
                for mode in args.modes:
                    for kind in args.steps:
                        base_ms = None
                        for name in ["nn.GELU"] + [a for a in args.activations if a != "nn.GELU"]:
                            ms, peak, kernels, gelu_names = measure(blocks, d, args.tokens, name, mode, dtype, kind, extras, device,
                                                                    not args.no_profile)
                            base_ms = ms if name == "nn.GELU" else base_ms
                            row = dict(device=where, torch=torch.__version__, triton=triton.__version__, blocks=blocks,
                                       d=d, tokens=args.tokens, dtype=dtype, mode=mode, step=kind, activation=name,
                                       ms=round(ms, 4), ratio_to_nn_gelu=round(ms / base_ms, 4), peak_mib=round(peak, 1),
                                       kernels=kernels, gelu_kernels=len(gelu_names),
                                       gelu_kernel_names=" ".join(gelu_names))
                            if name in args.activations:
                                rows.append(row)
                                writer.writerow(row)
                                f.flush()  # each row as it comes: a run cut short keeps what it measured
                                print(f"{f'{blocks}x{d}':>10} {dtype:>5} {mode:>8} {kind:>6} {name:>11} {ms:>10.3f} "
                                      f"{ms / base_ms:>9.3f}x {peak:>9.0f} {kernels:>8}  {' '.join(gelu_names)}",
                                      flush=True)
    print(f"wrote {csv_path}")
    summary = summarize(rows)
    (args.out / f"mlp_step_{args.label}.md").write_text(summary)
    print(summary)
    plot(rows, args.out / f"mlp_step_{args.label}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
