"""benchmarks/call_cost.py's GPU-only paths: the captured graphs, compile, the engine's threads.

They run on a CUDA GPU and skip elsewhere (CI has none). A captured step must compute what the
eager step computes, also after its inputs change in place; the thread switch must be undone.
That every mode runs on the GPU is test_call_cost.py's dry run, which checks the GPU rungs there.
"""
import sys

import pytest
import torch
from chapter_scripts import REPO, hardened_ops, requires_gpu

sys.path.insert(0, str(REPO / "benchmarks"))
pytestmark = requires_gpu


def load_mode(name):
    import importlib
    return importlib.import_module(name)


@pytest.mark.parametrize("op", ["F.gelu", "TritonGELU"])
def test_the_graph_of_the_op_replays_its_forward_and_backward(op):
    graphed = load_mode("call_cost_graphed")
    function = torch.nn.functional.gelu if op == "F.gelu" else hardened_ops.TritonGELU.apply
    x, g = torch.randn(1024, device="cuda"), torch.randn(1024, device="cuda")
    replay = graphed.op_alone(torch, function, x, g)  # checks the replayed gradient against eager
    replay()
    torch.cuda.synchronize()


@pytest.mark.parametrize("activation", ["nn.GELU", "TritonGELU"])
def test_the_graph_of_the_mlp_step_follows_new_inputs(activation):
    graphed = load_mode("call_cost_graphed")
    train_mlp = load_mode("call_cost_eager").load("call_cost_train_mlp", REPO / "extras" / "train_mlp.py")
    torch.manual_seed(0)
    block = train_mlp.mlp_block(activation).cuda()
    batch, target = torch.randn(64, 256, device="cuda"), torch.randn(64, 256, device="cuda")
    replay = graphed.whole_step(torch, block, batch, target)  # checks one replay against the eager step
    batch.copy_(torch.randn(64, 256, device="cuda"))
    replay()
    torch.cuda.synchronize()
    replayed = [p.grad.clone() for p in block.parameters()]
    block.zero_grad(set_to_none=True)
    torch.nn.functional.mse_loss(block(batch), target).backward()
    for got, p in zip(replayed, block.parameters()):
        torch.testing.assert_close(got, p.grad, rtol=1e-4, atol=1e-5)


def test_the_thread_switch_is_undone_after_each_loop():
    handoff = load_mode("call_cost_handoff")
    seen = []
    with handoff.engine_threads(torch, False, lean=True, ops=hardened_ops)():
        seen.append((torch.autograd.is_multithreading_enabled(), hardened_ops.LEAN_LAUNCH))
    assert seen == [(False, hardened_ops.LEAN_LAUNCH_AVAILABLE)]
    assert torch.autograd.is_multithreading_enabled() and not hardened_ops.LEAN_LAUNCH
