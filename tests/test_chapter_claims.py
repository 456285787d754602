"""The chapter's claims about autograd, asserted against every script's own classes."""
import pytest
import torch
import torch.nn.functional as F
from chapter_scripts import script_name, scripts_defining, seeded_randn

# The module-level list each script's backward methods append to (the chapter
# names it differently in each listing).
CALL_ORDER_LIST = {"02_graph_structure": "order", "04_standalone_complete": "call_order"}
GRAD_OUTPUT_LIST = {"03_fan_in": "captured", "04_standalone_complete": "captured_grads"}


def gelu_gradient_oracle(x, loss_of_z):
    """x.grad from PyTorch's own GELU under the same downstream expression."""
    x_oracle = x.detach().clone().requires_grad_(True)
    loss_of_z(F.gelu(x_oracle, approximate="none")).backward()
    return x_oracle.grad


# 17.1 -----------------------------------------------------------------------

@pytest.mark.parametrize("script", scripts_defining("TritonGELU"))
def test_grad_output_inside_2z_plus_1_is_uniformly_2(script):
    x = seeded_randn(6, seed=3).requires_grad_(True)
    seen = {}
    z = script.TritonGELU.apply(x)
    z.register_hook(lambda grad: seen.setdefault("z", grad.clone()))
    (2 * z + 1).sum().backward()
    assert torch.equal(seen["z"], torch.full_like(z, 2.0)), (
        f"{script_name(script)}: grad_output at TritonGELU's node is {seen['z']}, not uniformly 2")
    torch.testing.assert_close(x.grad, gelu_gradient_oracle(x, lambda z: (2 * z + 1).sum()), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("script", scripts_defining("TritonGELUBuggy"))
def test_buggy_backward_passes_the_sum_check_it_is_blind_to(script):
    x = seeded_randn(6, seed=3).requires_grad_(True)
    script.TritonGELUBuggy.apply(x).sum().backward()
    assert torch.allclose(x.grad, gelu_gradient_oracle(x, lambda z: z.sum()), atol=1e-5), (
        f"{script_name(script)}: under .sum().backward() grad_output is all ones, so even the buggy "
        "backward should agree with the oracle")


@pytest.mark.parametrize("script", scripts_defining("TritonGELUBuggy"))
def test_buggy_backward_fails_inside_2z_plus_1(script):
    x = seeded_randn(6, seed=3).requires_grad_(True)
    (2 * script.TritonGELUBuggy.apply(x) + 1).sum().backward()
    oracle = gelu_gradient_oracle(x, lambda z: (2 * z + 1).sum())
    assert not torch.allclose(x.grad, oracle, atol=1e-5), f"{script_name(script)}: the buggy chain matched the oracle"
    torch.testing.assert_close(2 * x.grad, oracle, atol=1e-5, rtol=1e-5,
                               msg=lambda m: f"the buggy gradient should be exactly half the correct one\n{m}")


@pytest.mark.parametrize("script", scripts_defining("TritonGELUBuggy"))
def test_buggy_backward_fails_under_a_random_grad_output(script):
    x = seeded_randn(1025, seed=6).requires_grad_(True)
    grad_output = seeded_randn(1025, seed=7)
    script.TritonGELUBuggy.apply(x).backward(grad_output)
    oracle = gelu_gradient_oracle(x, lambda z: (z * grad_output).sum())
    assert not torch.allclose(x.grad, oracle, atol=1e-5), (
        f"{script_name(script)}: a random grad_output did not expose the missing chain rule")


# 17.2 -----------------------------------------------------------------------

@pytest.mark.parametrize("script", scripts_defining("TritonGELU", "TritonSquare"))
def test_graph_edges_point_at_the_producing_nodes(script):
    x = seeded_randn(4, seed=4).requires_grad_(True)
    z = script.TritonGELU.apply(x)
    y = script.TritonSquare.apply(z)
    assert type(y.grad_fn).__name__ == "TritonSquareBackward"
    assert type(z.grad_fn).__name__ == "TritonGELUBackward"
    assert y.grad_fn.next_functions[0][0] is z.grad_fn, "y's node must point at z's node itself, not a copy"
    accumulate = z.grad_fn.next_functions[0][0]
    assert type(accumulate).__name__ == "AccumulateGrad" and accumulate.variable is x, (
        "z's node must end at the AccumulateGrad that writes x.grad")


@pytest.mark.parametrize("script", scripts_defining("TritonGELU", "TritonSquare"))
def test_backward_runs_in_reverse_forward_order(script):
    order = getattr(script, CALL_ORDER_LIST[script_name(script)])
    x = seeded_randn(4, seed=4).requires_grad_(True)
    y = script.TritonSquare.apply(script.TritonGELU.apply(x))
    order.clear()
    y.backward(seeded_randn(4, seed=8))
    assert order == ["TritonSquare.backward", "TritonGELU.backward"]


# 17.3 -----------------------------------------------------------------------

def grad_outputs_seen(script, loss_of_z, seed=5):
    """Every grad_output TritonGELU.backward received while backpropagating loss_of_z(TritonGELU(x))."""
    captured = getattr(script, GRAD_OUTPUT_LIST[script_name(script)])
    x = seeded_randn(4, seed=seed).requires_grad_(True)
    captured.clear()
    loss_of_z(script.TritonGELU.apply(x)).backward()
    torch.testing.assert_close(x.grad, gelu_gradient_oracle(x, loss_of_z), atol=1e-5, rtol=1e-5)
    return list(captured)


FAN_IN_SCRIPTS = [p for p in scripts_defining("TritonGELU") if script_name(p.values[0]) in GRAD_OUTPUT_LIST]


@pytest.mark.parametrize("script", FAN_IN_SCRIPTS)
@pytest.mark.parametrize("loss_of_z, summed", [
    pytest.param(lambda z: z.sum(), 1.0, id="used-once"),
    pytest.param(lambda z: z.sum() + z.sum(), 2.0, id="z.sum()+z.sum()"),
    pytest.param(lambda z: (2 * z).sum() + (3 * z).sum(), 5.0, id="2z+3z"),
])
def test_fan_in_calls_backward_once_with_the_summed_grad_output(script, loss_of_z, summed):
    seen = grad_outputs_seen(script, loss_of_z)
    assert len(seen) == 1, f"TritonGELU.backward ran {len(seen)} times; autograd sums first and calls it once"
    assert torch.equal(seen[0], torch.full_like(seen[0], summed))


@pytest.mark.parametrize("script", FAN_IN_SCRIPTS)
def test_fan_in_sums_non_uniform_contributions(script):
    a, b = seeded_randn(4, seed=9), seeded_randn(4, seed=10)
    seen = grad_outputs_seen(script, lambda z: (a * z).sum() + (b * z).sum())
    assert len(seen) == 1
    torch.testing.assert_close(seen[0], a + b)
