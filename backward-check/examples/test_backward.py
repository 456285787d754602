"""
The backward checker in a library's own tests
=============================================

A test file to copy into a library's test suite. It checks one Triton op, a fused
``silu(a) * b`` (the SwiGLU gate), the way autograd really calls its backward: random,
non-contiguous, stride-0 and shared grad_outputs, frozen inputs, inputs grown past one block,
backward run twice. ``.sum().backward()`` tests none of those.

    pip install "./backward-check[test,triton]"  # from a clone of the book's repository: the package, pytest, Triton
    pytest test_backward.py               # on a GPU; without one, in Triton's interpreter on the CPU

In your library, replace the op's section below with an import of your own ops, and give each
one a reference built from plain torch ops.
"""
# First, before anything imports triton: without a GPU the package switches Triton's
# interpreter on, which Triton reads only once, when it is first imported.
from backward_check.testing import assert_backward

import pytest
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

# %%
# The op under test (in your library: ``from mylibrary.ops import SiLUMul``). Its backward
# takes grad_output as it arrives, makes it contiguous, and writes into new tensors only.


@triton.jit
def silu_mul_forward_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(a_ptr + offsets, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + offsets, mask=mask).to(tl.float32)
    out = a * tl.sigmoid(a) * b
    tl.store(out_ptr + offsets, out.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def silu_mul_backward_kernel(grad_ptr, a_ptr, b_ptr, grad_a_ptr, grad_b_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    grad = tl.load(grad_ptr + offsets, mask=mask).to(tl.float32)
    a = tl.load(a_ptr + offsets, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + offsets, mask=mask).to(tl.float32)
    sigmoid = tl.sigmoid(a)
    grad_a = grad * b * sigmoid * (1 + a * (1 - sigmoid))
    tl.store(grad_a_ptr + offsets, grad_a.to(grad_a_ptr.dtype.element_ty), mask=mask)
    tl.store(grad_b_ptr + offsets, (grad * a * sigmoid).to(grad_b_ptr.dtype.element_ty), mask=mask)


BLOCK = 1024


class SiLUMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        a, b = a.contiguous(), b.contiguous()
        out = torch.empty_like(a)
        silu_mul_forward_kernel[(triton.cdiv(a.numel(), BLOCK),)](a, b, out, a.numel(), BLOCK=BLOCK)
        ctx.save_for_backward(a, b)
        return out

    @staticmethod
    def backward(ctx, grad_output):
        a, b = ctx.saved_tensors
        grad_output = grad_output.contiguous()  # after .sum() its strides are all 0
        grad_a, grad_b = torch.empty_like(a), torch.empty_like(b)
        silu_mul_backward_kernel[(triton.cdiv(a.numel(), BLOCK),)](grad_output, a, b, grad_a, grad_b, a.numel(),
                                                                   BLOCK=BLOCK)
        return grad_a, grad_b


def silu_mul_reference(a, b):
    return F.silu(a) * b


# %%
# The tests: one call of assert_backward each. On a trap it fails with the checker's report,
# which names the trap, the input whose gradient shows it, and the evidence.


@pytest.mark.parametrize("shape", [(8, 96), (2, 3, 40)])
def test_silu_mul_backward(shape):
    a, b = torch.randn(shape), torch.randn(shape)
    assert_backward(SiLUMul, a, b, reference=silu_mul_reference)


def test_silu_mul_backward_in_half_precision():
    a, b = torch.randn(16, 64, dtype=torch.float16), torch.randn(16, 64, dtype=torch.float16)
    report = assert_backward(SiLUMul, a, b, reference=silu_mul_reference)
    assert report.decided, report  # every check could decide: the tolerance fits float16


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-v"]))
