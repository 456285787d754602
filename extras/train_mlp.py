# /// script
# requires-python = ">=3.10"
# dependencies = [
#     "torch==2.13.0",
#     "triton==3.7.1; sys_platform == 'linux'",
#     "triton-windows==3.7.1.post27; sys_platform == 'win32'",
#     "numpy==2.4.6; python_version >= '3.11'",
#     "numpy==2.2.6; python_version < '3.11'",
#     "matplotlib==3.10.9",
# ]
# ///
"""
Beyond the chapter: TritonGELU trained inside a real model
==========================================================

Not part of Chapter 17. The chapter's lesson is that a custom op must be tested
the way it is used. Here it is used: the same MLP block (LayerNorm -> Linear(256,
1024) -> GELU -> Linear(1024, 256)) is trained three times, from identical initial
weights and data, with ``torch.nn.GELU``, with the chapter's ``TritonGELU``, and
with ``TritonGELUBuggy``, whose backward never multiplies by grad_output. The
loss at each step is printed as a table and drawn as a PNG: TritonGELU's curve
lies on nn.GELU's, and the buggy backward's leaves them. That is Chapter 16's bug
found by nothing more than training.

Run it with ``python extras/train_mlp.py`` (options: ``--help``), on a CUDA GPU or
on the CPU through Triton's interpreter. ``--compile`` needs a GPU.

The kernels and Functions come from ``hardened_ops.py``, the repository's one
hardened copy of the chapter's op.
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root, for hardened_ops
from hardened_ops import BACKEND, DEVICE, FunctionModule, TritonGELU, TritonGELUBuggy, TritonGELUModule  # noqa: E402,F401


# ---------------------------------------------------------------------------
# The model: one MLP block whose activation is chosen by name
# ---------------------------------------------------------------------------

ACTIVATIONS = {
    "nn.GELU": lambda: torch.nn.GELU(approximate="none"),
    "TritonGELU": lambda: FunctionModule(TritonGELU),
    "TritonGELUBuggy": lambda: FunctionModule(TritonGELUBuggy),
}
WIDTH, HIDDEN = 256, 1024


def mlp_block(activation):
    return torch.nn.Sequential(torch.nn.LayerNorm(WIDTH), torch.nn.Linear(WIDTH, HIDDEN),
                               ACTIVATIONS[activation](), torch.nn.Linear(HIDDEN, WIDTH))


def teacher_batches(steps, batch, seed, device):
    """The same regression task for every run: inputs, and a fixed random network's outputs."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed + 1)
    teacher = mlp_block("nn.GELU").to(device).requires_grad_(False)
    for _ in range(steps):  # (no torch.no_grad() here: it would stay on across each yield)
        x = torch.randn(batch, WIDTH, generator=generator).to(device)
        yield x, teacher(x)


def train(activation, steps=30, *, batch=64, seed=0, device=None, bf16=False, checkpoint=False,
          compile=False, lr=1e-3):
    """Trains one block; returns the loss at each step and the trained model."""
    device = device or DEVICE
    torch.manual_seed(seed)  # identical initial weights for every activation
    model = mlp_block(activation).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    forward = torch.compile(model) if compile else model
    losses = []
    for x, target in teacher_batches(steps, batch, seed + 100, device):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            if checkpoint:  # recompute the block's activations in backward instead of storing them
                y = torch.utils.checkpoint.checkpoint(forward, x, use_reentrant=False)
            else:
                y = forward(x)
        loss = torch.nn.functional.mse_loss(y.float(), target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, model


def max_parameter_difference(model_a, model_b):
    return max((a - b).abs().max().item() for a, b in zip(model_a.parameters(), model_b.parameters()))


def plot(curves, path, title):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed: no plot written to {path}", file=sys.stderr)
        return
    figure, axes = plt.subplots(figsize=(7, 4.2))
    styles = {"nn.GELU": dict(color="black", linewidth=3.5, alpha=0.35),
              "TritonGELU": dict(color="tab:blue", linewidth=1.4, linestyle="--"),
              "TritonGELUBuggy": dict(color="tab:red", linewidth=1.4)}
    for name, losses in curves.items():
        axes.plot(range(1, len(losses) + 1), losses, label=name, **styles[name])
    axes.set_yscale("log")
    axes.set_xlabel("step")
    axes.set_ylabel("MSE loss")
    axes.set_title(title)
    axes.legend()
    axes.grid(alpha=0.3)
    figure.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    print(f"plot written to {path}", file=sys.stderr)


def main(argv=None):
    parser = argparse.ArgumentParser(description="Train one MLP block with nn.GELU, TritonGELU and TritonGELUBuggy.")
    parser.add_argument("--steps", type=int, default=30, help="optimizer steps (default: %(default)s)")
    parser.add_argument("--batch", type=int, default=64, help="rows a batch (default: %(default)s)")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast")
    parser.add_argument("--checkpoint", action="store_true", help="activation checkpointing (use_reentrant=False)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (default mode; needs a GPU)")
    parser.add_argument("--plot", default="extras/results/train_mlp.png", help="PNG path (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch < 1:
        parser.error("--steps and --batch must be at least 1")
    # The plot's path, refused now rather than after training: a PNG, in a folder that is (or can be) a folder.
    if Path(args.plot).suffix.lower() != ".png" or Path(args.plot).is_dir():
        parser.error(f"--plot {args.plot}: give a file name ending in .png")
    if any(parent.exists() and not parent.is_dir() for parent in Path(args.plot).parents):
        parser.error(f"--plot {args.plot}: {next(p for p in Path(args.plot).parents if p.exists() and not p.is_dir())}"
                     f" is a file, not a folder")
    print(BACKEND, file=sys.stderr)
    if args.compile and DEVICE.type != "cuda":
        parser.error("--compile needs a GPU: torch.compile cannot compile the Triton interpreter's kernels")

    options = dict(steps=args.steps, batch=args.batch, bf16=args.bf16, checkpoint=args.checkpoint, compile=args.compile)
    curves, models = {}, {}
    for name in ACTIVATIONS:
        curves[name], models[name] = train(name, **options)

    # The loss table: every step for short runs, about twenty rows for long ones.
    every = max(1, args.steps // 20)
    print(f"{'step':>5} " + " ".join(f"{name:>16}" for name in curves))
    for step in range(args.steps):
        if step % every == 0 or step == args.steps - 1:
            print(f"{step + 1:>5} " + " ".join(f"{curves[name][step]:>16.6f}" for name in curves))
    print()
    # Over every step, not only the rows above: what "the same curve" rests on.
    for name in ("TritonGELU", "TritonGELUBuggy"):
        gap = max(abs(a - b) for a, b in zip(curves[name], curves["nn.GELU"]))
        print(f"{name} vs nn.GELU, largest loss difference over all {args.steps} steps: {gap:.3e}")
    buggy = curves["TritonGELUBuggy"]
    lowest = min(range(len(buggy)), key=buggy.__getitem__)
    print(f"TritonGELUBuggy's lowest loss: {buggy[lowest]:.6f} at step {lowest + 1}; final {buggy[-1]:.6f}")
    print("TritonGELU vs nn.GELU, largest parameter difference after training:",
          f"{max_parameter_difference(models['TritonGELU'], models['nn.GELU']):.3e}")
    print("TritonGELUBuggy vs nn.GELU, largest parameter difference after training:",
          f"{max_parameter_difference(models['TritonGELUBuggy'], models['nn.GELU']):.3e}")
    where = torch.cuda.get_device_name(DEVICE) if DEVICE.type == "cuda" else "CPU, Triton interpreter"
    extras = ", ".join(label for label, on in (("bf16 autocast", args.bf16), ("checkpointing", args.checkpoint),
                                               ("torch.compile", args.compile)) if on)
    plot(curves, args.plot, f"One MLP block, {args.steps} AdamW steps ({where}{', ' + extras if extras else ''})")


if __name__ == "__main__":
    main()
