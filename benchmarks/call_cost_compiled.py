"""
What a call costs, compiled: the MLP step under torch.compile
=============================================================

One of the modes of benchmarks/call_cost.py, in a process of its own, so that compiling cannot
move an eager figure. extras/train_mlp.py's block (64 x 256), the same step as the eager and
graphed modes (zero_grad, forward, MSE loss, backward), compiled two ways:

  torch.compile                      the default mode: Inductor's kernels, launched one by one
  mode="reduce-overhead"             the same, replayed as CUDA graphs (cudagraph_mark_step_begin
                                     before each step: the graphs' outputs are reused)

each with nn.GELU (the reference), nn.GELU compiled again (the A/A copy) and TritonGELU, whose
Triton kernels torch.compile takes in as user-defined kernels. A dry run without a GPU
compiles with the "eager" backend (Dynamo's tracing only), leaves TritonGELU's call out of the
graph (Dynamo cannot trace Triton's interpreter) and skips reduce-overhead.

    python benchmarks/call_cost_compiled.py --rows compiled.csv     # on a CUDA GPU
    python benchmarks/call_cost_compiled.py --dry-run               # anywhere, tiny sizes
"""
import sys

from call_cost_eager import load  # benchmarks/, beside this file
from call_cost_timing import AA_SUFFIX, REPO, Rung, run_mode


def compiled_step(torch, block, batch, target, mode, backend):
    model = torch.compile(block, mode=mode, backend=backend)

    def call():
        if mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()
        block.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(batch), target).backward()
    return call


def build(ops, torch, args):
    train_mlp = load("call_cost_train_mlp", REPO / "extras" / "train_mlp.py")
    on_gpu = ops.DEVICE.type == "cuda"
    rows = 4 if args.dry_run and ops.DEVICE.type != "cuda" else 64
    torch.manual_seed(0)
    batch = torch.randn(rows, train_mlp.WIDTH, device=ops.DEVICE)
    target = torch.randn(rows, train_mlp.WIDTH, device=ops.DEVICE)
    modes = [("default", None), ("reduce-overhead", "reduce-overhead")] if on_gpu else [("default", None)]
    backend = "inductor" if on_gpu else "eager"
    for label, mode in modes:
        group = f"MLP step ({rows} x {train_mlp.WIDTH}), compile {label}"
        blocks = [train_mlp.mlp_block(name).to(ops.DEVICE) for name in ("nn.GELU", "nn.GELU", "TritonGELU")]
        if not on_gpu:
            blocks[2][2].forward = torch.compiler.disable(blocks[2][2].forward)
        steps = [compiled_step(torch, block, batch, target, mode, backend) for block in blocks]
        yield [Rung(group, f"nn.GELU, torch.compile {label}", steps[0], n=rows),
               Rung(group, f"nn.GELU, torch.compile {label}" + AA_SUFFIX, steps[1], n=rows),
               Rung(group, f"TritonGELU, torch.compile {label}", steps[2], launch="ordinary", n=rows)]


if __name__ == "__main__":
    sys.exit(run_mode("compiled", __doc__.split("\n\n")[0], build))
