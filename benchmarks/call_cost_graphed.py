"""
What a call costs, graphed: forward, loss and backward captured in one CUDA graph
=================================================================================

One of the modes of benchmarks/call_cost.py, in a process of its own. Each rung captures a
whole step in one torch.cuda.graph and times graph.replay(): the CPU then launches one graph,
not each kernel, and neither Python nor the autograd engine runs at all.

  op alone, 2**k   y = op(x); torch.autograd.grad(y, x, g): F.gelu (the reference), F.gelu
                   captured again (the A/A copy), TritonGELU
  MLP step         extras/train_mlp.py's block (64 x 256): forward, MSE loss, backward into
                   .grad, as in PyTorch's whole-network capture; nn.GELU (the reference, and its
                   A/A copy) against TritonGELU

A separate rung, named for what it is, times torch.cuda.make_graphed_callables on the MLP
block: it graphs the block's forward and its backward as two graphs, and leaves the loss, the
copies into the graphs' inputs and the engine's call of the backward graph eager. It is not a
graph replay of the step.

Before it is timed, every captured step is replayed once and its gradients are checked against
the same step run eagerly. CUDA graphs need a CUDA GPU: a dry run without one times nothing.

    python benchmarks/call_cost_graphed.py --rows graphed.csv     # on a CUDA GPU
"""
import sys

from call_cost_eager import load, mlp_step  # benchmarks/, beside this file
from call_cost_timing import AA_SUFFIX, REPO, Rung, run_mode


def warm_up(torch, step):
    """Three steps on a side stream, as torch.cuda.graph asks before a capture."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)


def capture(torch, step):
    """A CUDA graph of step(), warmed up first; returns the graph and what step() returned during
    the capture (the graph's own output tensors)."""
    warm_up(torch, step)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = step()
    return graph, outputs


def op_alone(torch, op, x, g):
    """The graph of one forward and backward of op; checked against the eager gradient."""
    leaf = x.detach().clone().requires_grad_(True)

    def step():
        grad, = torch.autograd.grad(op(leaf), leaf, g)
        return grad
    graph, grad = capture(torch, step)
    graph.replay()
    torch.testing.assert_close(grad, step(), rtol=1e-5, atol=1e-6)
    return graph.replay


def whole_step(torch, block, batch, target):
    """The graph of the MLP step: forward, loss, backward into .grad (set to None before the capture,
    so the captured backward writes the grads rather than adding to last step's); checked against
    the eager step's gradients."""
    step = mlp_step(block, batch, target)

    def captured():
        torch.nn.functional.mse_loss(block(batch), target).backward()
    warm_up(torch, step)
    block.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured()
    graph.replay()
    torch.cuda.synchronize()
    replayed = [p.grad.clone() for p in block.parameters()]
    grads = [p.grad for p in block.parameters()]
    block.zero_grad(set_to_none=True)
    captured()
    for got, want in zip(replayed, block.parameters()):
        torch.testing.assert_close(got, want.grad, rtol=1e-4, atol=1e-5)
    for p, grad in zip(block.parameters(), grads):  # give the graph its own .grad tensors back
        p.grad = grad
    return graph.replay


def graphed_callables(torch, block, batch, target):
    """make_graphed_callables of the block; the step zeroes the grads, so nothing accumulates."""
    graphed = torch.cuda.make_graphed_callables(block, (batch.clone(),))

    def call():
        block.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(graphed(batch), target).backward()
    return call


def build(ops, torch, args):
    import torch.nn.functional as F
    train_mlp = load("call_cost_train_mlp", REPO / "extras" / "train_mlp.py")
    for n in args.sizes:
        generator = torch.Generator().manual_seed(n)
        x = torch.randn(n, generator=generator).to(ops.DEVICE)
        g = torch.randn(n, generator=generator).to(ops.DEVICE)
        group = f"graph replay, op alone, 2**{n.bit_length() - 1}"
        yield [Rung(group, "F.gelu, forward + backward", op_alone(torch, F.gelu, x, g), n=n),
               Rung(group, "F.gelu, forward + backward" + AA_SUFFIX, op_alone(torch, F.gelu, x, g), n=n),
               Rung(group, "TritonGELU, forward + backward", op_alone(torch, ops.TritonGELU.apply, x, g),
                    launch="ordinary", n=n)]
    rows = 4 if args.dry_run and ops.DEVICE.type != "cuda" else 64
    torch.manual_seed(0)
    batch = torch.randn(rows, train_mlp.WIDTH, device=ops.DEVICE)
    target = torch.randn(rows, train_mlp.WIDTH, device=ops.DEVICE)
    group = f"MLP step ({rows} x {train_mlp.WIDTH}), graphed"
    blocks = [train_mlp.mlp_block(name).to(ops.DEVICE) for name in ("nn.GELU", "nn.GELU", "TritonGELU")]
    wrapped = [train_mlp.mlp_block(name).to(ops.DEVICE) for name in ("nn.GELU", "TritonGELU")]
    yield [Rung(group, "nn.GELU, graph replay", whole_step(torch, blocks[0], batch, target), n=rows),
           Rung(group, "nn.GELU, graph replay" + AA_SUFFIX, whole_step(torch, blocks[1], batch, target), n=rows),
           Rung(group, "TritonGELU, graph replay", whole_step(torch, blocks[2], batch, target),
                launch="ordinary", n=rows),
           Rung(group, "nn.GELU, make_graphed_callables (loss, copies, engine eager)",
                graphed_callables(torch, wrapped[0], batch, target), n=rows),
           Rung(group, "TritonGELU, make_graphed_callables (loss, copies, engine eager)",
                graphed_callables(torch, wrapped[1], batch, target), launch="ordinary", n=rows)]


if __name__ == "__main__":
    sys.exit(run_mode("graphed", __doc__.split("\n\n")[0], build, gpu_only=True))
