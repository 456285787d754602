"""A Dynamo backend that changes the backward on purpose, for the compile check's tests: AOTAutograd's forward graph
run as it is, its backward graph with the first gradient scaled by 1.5. A module of its own, importing only torch, so
that the plugin's generated suite (tests/test_checker_compile_plugin.py) can register it by name in its worker too."""
import torch

NAME = "scales_the_first_gradient"


def scale_first_gradient(graph, example_inputs):
    """AOTAutograd's backward graph with its first gradient scaled by 1.5 (the gradients are the graph's outputs)."""
    output = next(node for node in graph.graph.nodes if node.op == "output")
    gradients = list(output.args[0])
    first = next(k for k, g in enumerate(gradients) if isinstance(g, torch.fx.Node))
    with graph.graph.inserting_before(output):
        gradients[first] = graph.graph.call_function(torch.ops.aten.mul.Tensor, (gradients[first], 1.5))
    output.args = (tuple(gradients),)
    graph.recompile()
    return graph


def as_it_is(graph, example_inputs):
    return graph


def scaling_backend():
    from torch._dynamo.backends.common import aot_autograd
    backend = aot_autograd(fw_compiler=as_it_is, bw_compiler=scale_first_gradient)
    backend.__name__ = NAME
    return backend
