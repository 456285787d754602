"""Every script's TritonGELU and TritonSquare, and hardened_ops.py's, against PyTorch,
forward and backward.

The scripts are the book's listings, so they are held to what the book gives them:
float32, here in odd sizes. hardened_ops.py is held to every float dtype as well.
Backward is always driven by a seeded random grad_output: with uniform ones, a
backward that forgets the chain rule passes (the chapter's whole point).
"""
import pytest
import torch
import torch.nn.functional as F
from chapter_scripts import ON_GPU, TRITON_RELEASE, hardened_ops, script_name, scripts_defining, seeded_randn

# Odd sizes put a masked, partly filled block at the end (BLOCK is 1024).
SHAPES = [(1,), (7,), (1023,), (1024,), (1025,), (4099,), (3, 5, 67)]

# (dtype, atol, rtol): the kernels compute fp16/bf16 in fp32 and round once on
# the store; PyTorch's reference runs in the same low-precision dtype.
DTYPE_TOLERANCES = [
    (torch.float16, 1e-3, 1e-3),
    (torch.bfloat16, 1e-2, 1.6e-2),
    (torch.float32, 1e-5, 1e-5),
    (torch.float64, 1e-12, 1e-12),
]
# Triton's interpreter before 3.2 evaluates fp64 erf and exp less exactly (measured 5e-9
# off in Triton 3.0 and 3.1); the GPU and later interpreters agree with PyTorch to 1e-12.
if not ON_GPU and TRITON_RELEASE < (3, 2):
    DTYPE_TOLERANCES[-1] = (torch.float64, 1e-8, 1e-8)


def gelu_reference(x):
    return F.gelu(x, approximate="none")


def square_reference(x):
    return x * x


REFERENCES = (("TritonGELU", gelu_reference), ("TritonSquare", square_reference))


def function_cases():
    """(script, Function name, PyTorch reference) for every script's copy of each Function, and the module's."""
    return [pytest.param(param.values[0], function_name, reference, id=f"{param.id}-{function_name}")
            for function_name, reference in REFERENCES
            for param in scripts_defining(function_name)] + hardened_cases()


def hardened_cases():
    return [pytest.param(hardened_ops, function_name, reference, id=f"hardened_ops-{function_name}")
            for function_name, reference in REFERENCES]


def check_against_reference(script, function_name, reference, x, grad_output, atol, rtol):
    """Forward and backward of script.<function_name> against `reference` through PyTorch autograd."""
    function = getattr(script, function_name)
    where = f"{script_name(script)}: {function_name}"

    x_triton = x.detach().clone().requires_grad_(True)
    y_triton = function.apply(x_triton)
    y_triton.backward(grad_output)

    x_torch = x.detach().clone().requires_grad_(True)
    y_torch = reference(x_torch)
    y_torch.backward(grad_output)

    assert y_triton.shape == x.shape and y_triton.dtype == x.dtype, (
        f"{where} forward returned {tuple(y_triton.shape)} {y_triton.dtype} for {tuple(x.shape)} {x.dtype}")
    torch.testing.assert_close(y_triton, y_torch, atol=atol, rtol=rtol,
                               msg=lambda m: f"{where} forward differs from PyTorch\n{m}")
    torch.testing.assert_close(x_triton.grad, x_torch.grad, atol=atol, rtol=rtol,
                               msg=lambda m: f"{where} backward differs from PyTorch autograd "
                                             f"under a random grad_output\n{m}")


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("script, function_name, reference", function_cases())
def test_matches_pytorch_for_odd_sizes(script, function_name, reference, shape):
    x = seeded_randn(*shape, seed=0)
    grad_output = seeded_randn(*shape, seed=1)
    check_against_reference(script, function_name, reference, x, grad_output, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype, atol, rtol", DTYPE_TOLERANCES, ids=lambda v: str(v).removeprefix("torch."))
@pytest.mark.parametrize("script, function_name, reference", hardened_cases())
def test_matches_pytorch_in_every_float_dtype(script, function_name, reference, dtype, atol, rtol):
    x = seeded_randn(2050, seed=2, dtype=dtype) * 3  # reaches GELU's flat tails, past |x| = 5
    grad_output = seeded_randn(2050, seed=3, dtype=dtype)
    check_against_reference(script, function_name, reference, x, grad_output, atol=atol, rtol=rtol)


@pytest.mark.parametrize("script, function_name, reference", hardened_cases())
def test_gradcheck_in_float64(script, function_name, reference):
    x = seeded_randn(2, 3, seed=4, dtype=torch.float64).requires_grad_(True)
    assert torch.autograd.gradcheck(getattr(script, function_name).apply, (x,), eps=1e-6, atol=1e-8), (
        f"{script_name(script)}: {function_name} fails gradcheck")
