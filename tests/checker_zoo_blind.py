"""A blind zoo for the backward checker: cases written without reading the checker or its own zoos.

    BLIND_LEGAL   = {name: (op, args, kwargs, reference, options)}
    BLIND_PLANTED = {name: (op, args, kwargs, reference, options, trap)}

Legal cases are correct code (some of it unusual) that the checker must report clean; each
planted case has one bug, named by `trap`, the trap that is its cause. Every case was checked
by hand, without the checker: tests/checker_zoo_blind_probes.py holds one probe per case
(legal: gradients against the reference, or gradcheck, under many grad_output layouts, with
inputs frozen in turn; planted: a direct provocation of the bug).

Every tensor is made on DEVICE (tests/chapter_scripts.py), so the file runs on a GPU too.
"""
import math

import torch
import torch.nn.functional as F
from torch.autograd import Function
from torch.autograd.function import once_differentiable

from chapter_scripts import DEVICE, seeded_randn  # noqa: I001  (picks the backend before triton is imported)
import hardened_ops  # noqa: E402  (chapter_scripts put the repository on sys.path)
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


# ---------------------------------------------------------------------------
# Helpers (inputs and shared maths)
# ---------------------------------------------------------------------------

def _generator(seed):
    return torch.Generator().manual_seed(seed)


def randperm(n, seed):
    """A permutation of range(n), drawn on the CPU generator, on DEVICE."""
    return torch.randperm(n, generator=_generator(seed)).to(DEVICE)


def randint(high, shape, seed):
    return torch.randint(high, shape, generator=_generator(seed)).to(DEVICE)


def random_cu_seqlens(total, segments, seed):
    """Sorted int32 offsets 0 = c[0] < c[1] < ... < c[segments] = total (every segment non-empty)."""
    cuts = torch.randperm(total - 1, generator=_generator(seed))[: segments - 1] + 1
    bounds = torch.cat([torch.zeros(1, dtype=torch.int64), cuts.sort().values, torch.tensor([total])])
    return bounds.to(torch.int32).to(DEVICE)


def rotary_tables(seq_len, dim, base=10000.0):
    """cos and sin tables of shape (seq_len, dim // 2), on DEVICE."""
    inv_freq = 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.float32, device=DEVICE) / dim)
    angles = torch.arange(seq_len, dtype=torch.float32, device=DEVICE)[:, None] * inv_freq[None, :]
    return angles.cos(), angles.sin()


def contiguous_strides(shape):
    strides, step = [], 1
    for size in reversed(tuple(shape)):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def chunked_cumsum(v, chunk=256):
    """A cumulative sum along the last dim taken in two levels: within chunks, then over chunk totals."""
    length = v.shape[-1]
    pad = (-length) % chunk
    chunks = F.pad(v, (0, pad)).reshape(*v.shape[:-1], -1, chunk)
    local = chunks.cumsum(-1)
    totals = local[..., -1]
    carry = totals.cumsum(-1) - totals
    return (local + carry[..., None]).reshape(*v.shape[:-1], -1)[..., :length]


def chunked_reverse_cumsum(v, chunk=256):
    return chunked_cumsum(v.flip(-1), chunk).flip(-1)


def silu_derivative(x):
    s = torch.sigmoid(x)
    return s * (1 + x * (1 - s))


def gelu_tanh_derivative(x):
    k = math.sqrt(2.0 / math.pi)
    t = torch.tanh(k * (x + 0.044715 * x ** 3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x)


# ---------------------------------------------------------------------------
# Triton kernels of this zoo (the hardened_ops ones are used as they are)
# ---------------------------------------------------------------------------

LEAKY_BLOCK = 1024


@triton.jit
def leaky_relu_forward_kernel(x_ptr, out_ptr, n, slope, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    tl.store(out_ptr + offsets, tl.where(x > 0, x, x * slope), mask=mask)


@triton.jit
def leaky_relu_backward_kernel(grad_out_ptr, x_ptr, grad_in_ptr, n, slope, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    g = tl.load(grad_out_ptr + offsets, mask=mask, other=0.0)
    tl.store(grad_in_ptr + offsets, tl.where(x > 0, g, g * slope), mask=mask)


def _leaky_forward(x, slope):
    x, = hardened_ops.kernel_operands(x)
    out = torch.empty_like(x)
    n = x.numel()
    if n:
        with hardened_ops.device_of(x):
            leaky_relu_forward_kernel[(triton.cdiv(n, LEAKY_BLOCK),)](x, out, n, slope, BLOCK=LEAKY_BLOCK)
    return out


# ===========================================================================
# LEGAL CASES
# ===========================================================================

class PermuteRows(Function):
    """Legal: gathers rows through an int64 permutation; the backward scatters through its inverse."""
    @staticmethod
    def forward(ctx, x, perm):
        if perm.dtype != torch.int64 or perm.dim() != 1 or perm.numel() != x.shape[0]:
            raise ValueError(f"perm must be an int64 permutation of x's {x.shape[0]} rows, "
                             f"got {perm.dtype} of shape {tuple(perm.shape)}")
        ctx.save_for_backward(perm)
        return x.index_select(0, perm)

    @staticmethod
    def backward(ctx, grad_out):
        perm, = ctx.saved_tensors
        inverse = torch.empty_like(perm)
        inverse[perm] = torch.arange(perm.numel(), device=perm.device)
        return grad_out.index_select(0, inverse), None


def permute_rows_reference(x, perm):
    return x[perm]


class VarlenSegmentMean(Function):
    """Legal: the mean of every variable-length row segment cu_seqlens[i]:cu_seqlens[i+1] (sorted int32 offsets)."""
    @staticmethod
    def forward(ctx, x, cu_seqlens):
        if cu_seqlens.dtype not in (torch.int32, torch.int64) or cu_seqlens.dim() != 1:
            raise TypeError("cu_seqlens must be a 1-D int32 or int64 tensor of offsets")
        lengths = cu_seqlens.diff().long()
        if int(cu_seqlens[0]) != 0 or int(cu_seqlens[-1]) != x.shape[0] or bool((lengths <= 0).any()):
            raise ValueError(f"cu_seqlens must rise strictly from 0 to x.shape[0] = {x.shape[0]}")
        segment = torch.repeat_interleave(torch.arange(lengths.numel(), device=x.device), lengths)
        sums = x.new_zeros((lengths.numel(),) + tuple(x.shape[1:])).index_add_(0, segment, x)
        counts = lengths.to(x.dtype).view(-1, *([1] * (x.dim() - 1)))
        ctx.save_for_backward(segment, counts)
        return sums / counts

    @staticmethod
    def backward(ctx, grad_out):
        segment, counts = ctx.saved_tensors
        return (grad_out / counts).index_select(0, segment), None


def varlen_segment_mean_reference(x, cu_seqlens):
    bounds = cu_seqlens.tolist()
    return torch.stack([x[a:b].mean(0) for a, b in zip(bounds[:-1], bounds[1:])])


class RotaryEmbedding(Function):
    """Legal: rotary embedding (rotate-half) with cos/sin tables passed in and given no gradient (no_grad)."""
    @staticmethod
    def forward(ctx, x, cos, sin):
        half = x.shape[-1] // 2
        if x.shape[-1] % 2 or cos.shape != (x.shape[-2], half) or sin.shape != cos.shape:
            raise ValueError(f"cos and sin must be ({x.shape[-2]}, {half}) tables for x of shape {tuple(x.shape)}")
        ctx.save_for_backward(cos, sin)
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1)

    @staticmethod
    def backward(ctx, grad_out):
        cos, sin = ctx.saved_tensors
        half = grad_out.shape[-1] // 2
        g1, g2 = grad_out[..., :half], grad_out[..., half:]
        return torch.cat((g1 * cos + g2 * sin, g2 * cos - g1 * sin), -1), None, None


def rotary_reference(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1)


class PositiveLog(Function):
    """Legal: refuses values <= 0 with a clear ValueError; on positive inputs, log done right."""
    @staticmethod
    def forward(ctx, x):
        if bool((x <= 0).any()):
            raise ValueError("PositiveLog takes strictly positive inputs only")
        ctx.save_for_backward(x)
        return x.log()

    @staticmethod
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        return grad_out / x


class ContiguousOnlySoftsign(Function):
    """Legal: refuses a non-contiguous input with a clear ValueError; takes any grad_output layout."""
    @staticmethod
    def forward(ctx, x):
        if not x.is_contiguous():
            raise ValueError("ContiguousOnlySoftsign takes contiguous inputs only: call .contiguous() first")
        flat = x.view(-1)
        ctx.save_for_backward(x)
        return (flat / (1 + flat.abs())).view(x.shape)

    @staticmethod
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        return grad_out / (1 + x.abs()) ** 2


def softsign_reference(x):
    return x / (1 + x.abs())


class Bf16Softmax(Function):
    """Legal: softmax of a bfloat16 input over the last dim, computed in fp32 and rounded to bf16 (as torch does)."""
    @staticmethod
    def forward(ctx, x):
        y = torch.softmax(x.float(), -1).to(x.dtype)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_out):
        y, = ctx.saved_tensors
        yf, gf = y.float(), grad_out.float()
        return (yf * (gf - (gf * yf).sum(-1, keepdim=True))).to(grad_out.dtype)


def softmax_reference(x):
    return torch.softmax(x, -1)


class Bf16RMSNorm(Function):
    """Legal: RMSNorm of bfloat16 x and weight, statistics and gradients in fp32; the backward returns a trailing
    None for the defaulted eps, which is not passed (autograd accepts extra None gradients)."""
    @staticmethod
    def forward(ctx, x, weight, eps=1e-6):
        xf = x.float()
        rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, rstd)
        return (xf * rstd * weight.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        x, weight, rstd = ctx.saved_tensors
        xf, wf, gf = x.float(), weight.float(), grad_out.float()
        xhat = xf * rstd
        gxhat = gf * wf
        grad_x = rstd * (gxhat - xhat * (gxhat * xhat).mean(-1, keepdim=True))
        grad_w = (gf * xhat).reshape(-1, x.shape[-1]).sum(0)
        return grad_x.to(x.dtype), grad_w.to(weight.dtype), None


def rmsnorm_reference(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


class Fp16Silu(Function):
    """Legal: SiLU of a float16 input, computed in fp32 and rounded to fp16."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return F.silu(x.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        return (grad_out.float() * silu_derivative(x.float())).to(grad_out.dtype)


class ChunkedPrefixVariance(Function):
    """Legal: the variance of every prefix along the last dim, E[x^2] - E[x]^2 from fp32 running sums taken in
    256-element chunks. On inputs far from zero (here mean 40) the cancellation leaves it ~1e-4 (relative) from
    float64; the maths, forward and backward, is right."""
    @staticmethod
    def forward(ctx, x):
        count = torch.arange(1, x.shape[-1] + 1, dtype=x.dtype, device=x.device)
        mean = chunked_cumsum(x) / count
        ctx.save_for_backward(x, mean, count)
        return chunked_cumsum(x * x) / count - mean * mean

    @staticmethod
    def backward(ctx, grad_out):
        x, mean, count = ctx.saved_tensors
        # d var_t / d x_s = 2 (x_s - mean_t) / t for s <= t
        return 2 * x * chunked_reverse_cumsum(grad_out / count) - 2 * chunked_reverse_cumsum(grad_out * mean / count)


def prefix_variance_reference(x):
    count = torch.arange(1, x.shape[-1] + 1, dtype=x.dtype, device=x.device)
    mean = x.cumsum(-1) / count
    return (x * x).cumsum(-1) / count - mean * mean


class BatchNormTraining(Function):
    """Legal: training-mode batch norm that updates running_mean/running_var in place under no_grad
    (the buffers are named in no_grad; the output does not depend on them)."""
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var):
        momentum, eps = 0.1, 1e-5
        mean = x.mean(0)
        var = x.var(0, unbiased=False)
        with torch.no_grad():
            running_mean.mul_(1 - momentum).add_(momentum * mean)
            running_var.mul_(1 - momentum).add_(momentum * x.var(0, unbiased=True))
        rstd = torch.rsqrt(var + eps)
        xhat = (x - mean) * rstd
        ctx.save_for_backward(xhat, rstd, weight)
        return xhat * weight + bias

    @staticmethod
    def backward(ctx, grad_out):
        xhat, rstd, weight = ctx.saved_tensors
        gxhat = grad_out * weight
        grad_x = rstd * (gxhat - gxhat.mean(0) - xhat * (gxhat * xhat).mean(0))
        return grad_x, (grad_out * xhat).sum(0), grad_out.sum(0), None, None


def batch_norm_reference(x, weight, bias, running_mean, running_var):
    return F.batch_norm(x, None, None, weight, bias, training=True, eps=1e-5)


class LinearKeepdimBiasGrad(Function):
    """Legal: y = x @ w.T + b, with the (D,) bias gradient returned as (1, D): autograd sums it to size."""
    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return x @ weight.t() + bias

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        return grad_out @ weight, grad_out.t() @ x, grad_out.sum(0, keepdim=True)


class LinearUnreducedBiasGrad(Function):
    """Legal: y = x @ w.T + b, with the (D,) bias gradient returned unreduced as (B, D): autograd sums it."""
    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return x @ weight.t() + bias

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        return grad_out @ weight, grad_out.t() @ x, grad_out


def linear_reference(x, weight, bias):
    return F.linear(x, weight, bias)


class TanhViaVjp(Function):
    """Legal: defines vjp instead of backward (autograd calls either)."""
    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def vjp(ctx, grad_out):
        y, = ctx.saved_tensors
        return grad_out * (1 - y * y)


class CubeSetupContext(Function):
    """Legal: the forward/setup_context split (forward takes no ctx) with a default scale; its backward is
    built from differentiable ops, so second order is right."""
    @staticmethod
    def forward(x, scale=1.0):
        return scale * x ** 3

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, scale = inputs
        ctx.save_for_backward(x)
        ctx.scale = scale

    @staticmethod
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        return grad_out * 3 * ctx.scale * x * x, None


def cube_reference(x, scale=1.0):
    return scale * x ** 3


class PairwiseDistance(Function):
    """Legal: Euclidean pairwise distances whose backward is once_differentiable, so double backward is refused
    (it raises when grad_output requires grad; otherwise the gradient comes back with no graph, and
    differentiating it raises); the reference, torch.cdist without the mm path, has no double backward either."""
    @staticmethod
    def forward(ctx, x, y):
        diff = x[:, None, :] - y[None, :, :]
        dist = diff.pow(2).sum(-1).sqrt()
        ctx.save_for_backward(x, y, dist)
        return dist

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        x, y, dist = ctx.saved_tensors
        weight = torch.where(dist > 0, grad_out / dist, torch.zeros_like(dist))
        diff = x[:, None, :] - y[None, :, :]
        weighted = weight[..., None] * diff
        return weighted.sum(1), -weighted.sum(0)


def cdist_reference(x, y):
    return torch.cdist(x, y, compute_mode="donot_use_mm_for_euclid_dist")


class XSinX(Function):
    """Legal: x * sin(x) with a backward of differentiable torch ops: its double backward is right."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sin(x)

    @staticmethod
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        return grad_out * (torch.sin(x) + x * torch.cos(x))


class MaskedScale(Function):
    """Legal: 3 * x where a bool mask is set, 0 elsewhere: the true gradient is exactly zero off the mask."""
    @staticmethod
    def forward(ctx, x, mask):
        ctx.save_for_backward(mask)
        return torch.where(mask, 3 * x, torch.zeros_like(x))

    @staticmethod
    def backward(ctx, grad_out):
        mask, = ctx.saved_tensors
        return torch.where(mask, 3 * grad_out, torch.zeros_like(grad_out)), None


def masked_scale_reference(x, mask):
    return 3 * x * mask


class ClampSaturating(Function):
    """Legal: clamp to [-0.5, 0.5]; the gradient is exactly zero in the saturated regions (most of the input)."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(-0.5, 0.5)

    @staticmethod
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        return grad_out * ((x > -0.5) & (x < 0.5)).to(grad_out.dtype)


def clamp_reference(x):
    return x.clamp(-0.5, 0.5)


def _column_scale(columns, dtype, device):
    return 1.0 + 0.25 * torch.arange(columns, dtype=dtype, device=device)


class ColumnScale(Function):
    """Legal: scales column j by 1 + j/4 for any width; its reference closes over a table for width 6 only."""
    @staticmethod
    def forward(ctx, x):
        scale = _column_scale(x.shape[-1], x.dtype, x.device)
        ctx.save_for_backward(scale)
        return x * scale

    @staticmethod
    def backward(ctx, grad_out):
        scale, = ctx.saved_tensors
        return grad_out * scale


COLUMN_SCALE_6 = _column_scale(6, torch.float64, DEVICE)  # the fixed-size table the reference closes over


def column_scale_reference(x):
    return x * COLUMN_SCALE_6


class GramMatrix(Function):
    """Legal: x @ x.T, a square (n, n) output from an (n, d) input, with the backward (g + g.T) @ x."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x @ x.t()

    @staticmethod
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        return (grad_out + grad_out.t()) @ x


def gram_reference(x):
    return x @ x.t()


class MatrixSquare(Function):
    """Legal: x @ x for a square (n, n) input; the backward g @ x.T + x.T @ g keeps the transposes right."""
    @staticmethod
    def forward(ctx, x):
        if x.dim() != 2 or x.shape[0] != x.shape[1]:
            raise ValueError(f"MatrixSquare takes a square matrix, got {tuple(x.shape)}")
        ctx.save_for_backward(x)
        return x @ x

    @staticmethod
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        return grad_out @ x.t() + x.t() @ grad_out


def matrix_square_reference(x):
    return x @ x


class SinCosLazyGrads(Function):
    """Legal: two outputs with set_materialize_grads(False); a None grad_output (unused output) is skipped."""
    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x)
        return torch.sin(x), torch.cos(x)

    @staticmethod
    def backward(ctx, grad_sin, grad_cos):
        x, = ctx.saved_tensors
        grad_x = None
        if grad_sin is not None:
            grad_x = grad_sin * torch.cos(x)
        if grad_cos is not None:
            term = -grad_cos * torch.sin(x)
            grad_x = term if grad_x is None else grad_x + term
        return grad_x


def sincos_reference(x):
    return torch.sin(x), torch.cos(x)


class LayerNormWithStats(Function):
    """Legal: layer norm returning (y, mean, rstd); the statistics are marked non-differentiable, grads are not
    materialized, and an unused y (grad None) gives no gradient."""
    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.set_materialize_grads(False)
        eps = 1e-5
        mean = x.mean(-1, keepdim=True)
        rstd = torch.rsqrt(x.var(-1, unbiased=False, keepdim=True) + eps)
        xhat = (x - mean) * rstd
        ctx.save_for_backward(xhat, rstd, weight)
        ctx.mark_non_differentiable(mean, rstd)
        return xhat * weight + bias, mean, rstd

    @staticmethod
    def backward(ctx, grad_y, grad_mean, grad_rstd):
        if grad_y is None:
            return None, None, None
        xhat, rstd, weight = ctx.saved_tensors
        gxhat = grad_y * weight
        grad_x = rstd * (gxhat - gxhat.mean(-1, keepdim=True) - xhat * (gxhat * xhat).mean(-1, keepdim=True))
        dims = tuple(range(grad_y.dim() - 1))
        return grad_x, (grad_y * xhat).sum(dims), grad_y.sum(dims)


def layer_norm_with_stats_reference(x, weight, bias):
    eps = 1e-5
    mean = x.mean(-1, keepdim=True)
    rstd = torch.rsqrt(x.var(-1, unbiased=False, keepdim=True) + eps)
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps), mean.detach(), rstd.detach()


class _ScaledSoftplus(Function):
    @staticmethod
    def forward(ctx, x, beta, threshold):
        ctx.save_for_backward(x)
        ctx.beta, ctx.threshold = beta, threshold
        return F.softplus(x, beta, threshold)

    @staticmethod
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        bx = ctx.beta * x
        slope = torch.where(bx > ctx.threshold, torch.ones_like(x), torch.sigmoid(bx))
        return grad_out * slope, None, None


def softplus_keyword_only(x, *, beta=1.0, threshold=20.0):
    """Legal: a plain callable with keyword-only arguments and defaults, wrapping a Function."""
    return _ScaledSoftplus.apply(x, beta, threshold)


def softplus_reference(x, *, beta=1.0, threshold=20.0):
    return F.softplus(x, beta, threshold)


class _Affine(Function):
    @staticmethod
    def forward(ctx, x, weight, bias, scale):
        ctx.save_for_backward(x, weight)
        ctx.scale, ctx.has_bias = scale, bias is not None
        out = scale * x * weight
        return out + bias if bias is not None else out

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        grad_x = ctx.scale * grad_out * weight
        grad_w = (ctx.scale * grad_out * x).sum(0)
        grad_b = grad_out.sum(0) if ctx.has_bias else None
        return grad_x, grad_w, grad_b, None


def affine_keyword_tensor(x, *, weight, bias=None, scale=1.0):
    """Legal: a plain callable whose weight is a keyword-only tensor (it gets a gradient); bias defaults to None."""
    return _Affine.apply(x, weight, bias, scale)


def affine_reference(x, *, weight, bias=None, scale=1.0):
    out = scale * x * weight
    return out + bias if bias is not None else out


class WeightedSum(Function):
    """Legal: forward(ctx, *xs) takes any number of tensors: sum_i (i + 1) * xs[i]."""
    @staticmethod
    def forward(ctx, *xs):
        ctx.count = len(xs)
        return sum((i + 1) * x for i, x in enumerate(xs))

    @staticmethod
    def backward(ctx, grad_out):
        return tuple((i + 1) * grad_out for i in range(ctx.count))


def weighted_sum(*xs):
    """Legal: a plain *args callable over WeightedSum."""
    return WeightedSum.apply(*xs)


def weighted_sum_reference(*xs):
    return sum((i + 1) * x for i, x in enumerate(xs))


class DoubleInPlace(Function):
    """Legal: multiplies x by 2 in place and declares it with ctx.mark_dirty."""
    @staticmethod
    def forward(ctx, x):
        x.mul_(2.0)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out * 2.0


def double_reference(x):
    return 2.0 * x


class SigmoidInPlace(Function):
    """Legal: sigmoid written into x (ctx.mark_dirty), saving the output for its backward."""
    @staticmethod
    def forward(ctx, x):
        x.sigmoid_()
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, grad_out):
        y, = ctx.saved_tensors
        return grad_out * y * (1 - y)


def sigmoid_reference(x):
    return torch.sigmoid(x)


class TransposedOutputLinear(Function):
    """Legal: x @ w.T returned as the transposed view (w @ x.T).T, a non-contiguous output."""
    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return (weight @ x.t()).t()

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        return grad_out @ weight, grad_out.t() @ x


def linear_no_bias_reference(x, weight):
    return x @ weight.t()


class RowMeanBroadcast(Function):
    """Legal: each row's mean, returned expanded (stride 0) over the row; the gradient is returned expanded too."""
    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        return x.mean(-1, keepdim=True).expand(x.shape)

    @staticmethod
    def backward(ctx, grad_out):
        return (grad_out.sum(-1, keepdim=True) / ctx.shape[-1]).expand(ctx.shape)


def row_mean_broadcast_reference(x):
    return x.mean(-1, keepdim=True).expand(x.shape)


class MSELoss(Function):
    """Legal: a 0-dim loss mean((pred - target)^2) of two differentiable inputs; grad_output arrives 0-dim."""
    @staticmethod
    def forward(ctx, pred, target):
        diff = pred - target
        ctx.save_for_backward(diff)
        return (diff * diff).mean()

    @staticmethod
    def backward(ctx, grad_out):
        diff, = ctx.saved_tensors
        grad_pred = grad_out * 2 * diff / diff.numel()
        return grad_pred, -grad_pred


def mse_reference(pred, target):
    return F.mse_loss(pred, target)


class CrossEntropyMean(Function):
    """Legal: a 0-dim mean cross-entropy over int64 class targets (the targets pass through)."""
    @staticmethod
    def forward(ctx, logits, target):
        logp = torch.log_softmax(logits, -1)
        ctx.save_for_backward(logp, target)
        return -logp.gather(-1, target[:, None]).mean()

    @staticmethod
    def backward(ctx, grad_out):
        logp, target = ctx.saved_tensors
        grad = logp.exp() - F.one_hot(target, logp.shape[-1]).to(logp.dtype)
        return grad_out * grad / target.numel(), None


def cross_entropy_reference(logits, target):
    return F.cross_entropy(logits, target)


class MaxWithIndex(Function):
    """Legal: (values, indices) of the row max; the int64 indices are marked non-differentiable."""
    @staticmethod
    def forward(ctx, x):
        values, indices = x.max(dim=-1)
        ctx.mark_non_differentiable(indices)
        ctx.save_for_backward(indices)
        ctx.shape = x.shape
        return values, indices

    @staticmethod
    def backward(ctx, grad_values, grad_indices):
        indices, = ctx.saved_tensors
        grad_x = grad_values.new_zeros(ctx.shape)
        return grad_x.scatter_(-1, indices[..., None], grad_values[..., None])


def max_with_index_reference(x):
    return tuple(torch.max(x, dim=-1))


class AddSharedGrad(Function):
    """Legal: x + y whose backward returns the one grad_output object for both inputs (the gradients are equal)."""
    @staticmethod
    def forward(ctx, x, y):
        return x + y

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out, grad_out


def add_reference(x, y):
    return x + y


class Embedding(Function):
    """Legal: an embedding lookup through int64 indices with repeats; the backward scatter-adds (index_add_)."""
    @staticmethod
    def forward(ctx, weight, indices):
        ctx.save_for_backward(indices)
        ctx.rows = weight.shape[0]
        return weight.index_select(0, indices.reshape(-1)).reshape(*indices.shape, weight.shape[1])

    @staticmethod
    def backward(ctx, grad_out):
        indices, = ctx.saved_tensors
        dim = grad_out.shape[-1]
        grad_w = grad_out.new_zeros((ctx.rows, dim)).index_add_(0, indices.reshape(-1), grad_out.reshape(-1, dim))
        return grad_w, None


def embedding_reference(weight, indices):
    return F.embedding(indices, weight)


class RoundedOffset(Function):
    """Legal: x + round(t); the gradient for t is exactly zero, returned as zeros."""
    @staticmethod
    def forward(ctx, x, t):
        ctx.t_shape = t.shape
        return x + torch.round(t)

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out, grad_out.new_zeros(ctx.t_shape)


def rounded_offset_reference(x, t):
    return x + torch.round(t)


class FloorOffsetNoneGrad(Function):
    """Legal: 2x + floor(t); the gradient for t is exactly zero, returned as None (which autograd reads as zero)."""
    @staticmethod
    def forward(ctx, x, t):
        return 2 * x + torch.floor(t)

    @staticmethod
    def backward(ctx, grad_out):
        return 2 * grad_out, None


def floor_offset_reference(x, t):
    return 2 * x + torch.floor(t)


class UnflattenTriple(Function):
    """Legal: 3x reshaped (B, N) -> (B, groups, N/groups); the backward calls .contiguous() before .view, so
    every grad_output layout works."""
    @staticmethod
    def forward(ctx, x, groups):
        ctx.shape = x.shape
        return (3 * x).reshape(x.shape[0], groups, x.shape[1] // groups)

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out.contiguous().view(ctx.shape) * 3, None


def unflatten_triple_reference(x, groups):
    return (3 * x).reshape(x.shape[0], groups, x.shape[1] // groups)


class RowSumExpandedGrad(Function):
    """Legal: the sum of each row; the gradient is returned as a stride-0 expand of grad_output (no copy)."""
    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        return x.sum(-1)

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out.unsqueeze(-1).expand(ctx.shape)


def row_sum_reference(x):
    return x.sum(-1)


class MulAddNeedsInputGrad(Function):
    """Legal: x * y + z, computing only the gradients ctx.needs_input_grad asks for (None for frozen inputs)."""
    @staticmethod
    def forward(ctx, x, y, z):
        ctx.save_for_backward(x, y)
        return x * y + z

    @staticmethod
    def backward(ctx, grad_out):
        x, y = ctx.saved_tensors
        need_x, need_y, need_z = ctx.needs_input_grad
        return (grad_out * y if need_x else None,
                grad_out * x if need_y else None,
                grad_out if need_z else None)


def mul_add_reference(x, y, z):
    return x * y + z


class TritonLeakyReLU(Function):
    """Legal: leaky ReLU through Triton kernels of this file (cdiv grid, contiguous operands); no double backward."""
    @staticmethod
    def forward(ctx, x, slope):
        ctx.save_for_backward(x)
        ctx.slope = slope
        return _leaky_forward(x, slope)

    @staticmethod
    @hardened_ops.no_double_backward
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        grad_out, x = hardened_ops.kernel_operands(grad_out, x)
        grad_in = torch.empty_like(x)
        n = x.numel()
        if n:
            with hardened_ops.device_of(x):
                leaky_relu_backward_kernel[(triton.cdiv(n, LEAKY_BLOCK),)](
                    grad_out, x, grad_in, n, ctx.slope, BLOCK=LEAKY_BLOCK)
        return grad_in, None


def leaky_relu_reference(x, slope):
    return F.leaky_relu(x, slope)


def gelu_reference(x):
    return F.gelu(x)


def square_reference(x):
    return x * x


BLIND_LEGAL = {
    "permute_rows_int64_perm": (
        PermuteRows, (seeded_randn(6, 5, seed=101), randperm(6, seed=102)), {}, permute_rows_reference, {}),
    "varlen_segment_mean_cu_seqlens": (
        VarlenSegmentMean,
        (seeded_randn(10, 4, seed=103), torch.tensor([0, 3, 4, 8, 10], dtype=torch.int32, device=DEVICE)),
        {}, varlen_segment_mean_reference, {}),
    "rotary_embedding_tables_no_grad": (
        RotaryEmbedding, (seeded_randn(2, 5, 8, seed=104), *rotary_tables(5, 8)), {}, rotary_reference,
        {"no_grad": ("cos", "sin")}),
    "positive_log_validates_values": (
        PositiveLog, (seeded_randn(4, 6, seed=105).abs() + 0.5,), {}, torch.log, {}),
    "softsign_refuses_noncontiguous_input": (
        ContiguousOnlySoftsign, (seeded_randn(4, 6, seed=106),), {}, softsign_reference, {}),
    "softmax_bf16": (
        Bf16Softmax, (seeded_randn(4, 6, seed=107, dtype=torch.bfloat16),), {}, softmax_reference, {}),
    "rmsnorm_bf16": (
        Bf16RMSNorm, (seeded_randn(4, 8, seed=108, dtype=torch.bfloat16),
                      (1 + 0.1 * seeded_randn(8, seed=109)).to(torch.bfloat16)), {}, rmsnorm_reference, {}),
    "silu_fp16": (
        Fp16Silu, (seeded_randn(4, 6, seed=110, dtype=torch.float16),), {}, F.silu, {}),
    "triton_gelu_bf16": (
        hardened_ops.TritonGELU, (seeded_randn(4, 6, seed=111, dtype=torch.bfloat16),), {}, gelu_reference, {}),
    "chunked_prefix_variance_fp32": (
        ChunkedPrefixVariance, (seeded_randn(2, 2048, seed=112) + 40.0,), {}, prefix_variance_reference, {}),
    "batch_norm_updates_running_stats": (
        BatchNormTraining,
        (seeded_randn(8, 4, seed=113), 1 + 0.1 * seeded_randn(4, seed=114), 0.1 * seeded_randn(4, seed=115),
         torch.zeros(4, device=DEVICE), torch.ones(4, device=DEVICE)),
        {}, batch_norm_reference, {"no_grad": ("running_mean", "running_var")}),
    "linear_bias_grad_keepdim_1xD": (
        LinearKeepdimBiasGrad, (seeded_randn(5, 4, seed=116), seeded_randn(3, 4, seed=117), seeded_randn(3, seed=118)),
        {}, linear_reference, {}),
    "linear_bias_grad_unreduced_BxD": (
        LinearUnreducedBiasGrad,
        (seeded_randn(5, 4, seed=119), seeded_randn(3, 4, seed=120), seeded_randn(3, seed=121)),
        {}, linear_reference, {}),
    "tanh_defines_vjp": (
        TanhViaVjp, (seeded_randn(4, 6, seed=122),), {}, None, {}),
    "cube_setup_context_second_order": (
        CubeSetupContext, (seeded_randn(4, 6, seed=123), 0.5), {}, cube_reference, {"second_order": True}),
    "pairwise_distance_once_differentiable": (
        PairwiseDistance, (seeded_randn(5, 3, seed=124), seeded_randn(4, 3, seed=125)), {}, cdist_reference,
        {"second_order": True}),
    "triton_gelu_refuses_create_graph": (
        hardened_ops.TritonGELU, (seeded_randn(4, 6, seed=126),), {}, gelu_reference, {"second_order": True}),
    "x_sin_x_second_order": (
        XSinX, (seeded_randn(4, 6, seed=127),), {}, lambda x: x * torch.sin(x), {"second_order": True}),
    "masked_scale_zero_grad_region": (
        MaskedScale, (seeded_randn(4, 6, seed=128), seeded_randn(4, 6, seed=129) > 0), {}, masked_scale_reference, {}),
    "clamp_saturated_regions": (
        ClampSaturating, (seeded_randn(4, 6, seed=130),), {}, clamp_reference, {}),
    "column_scale_fixed_size_reference": (
        ColumnScale, (seeded_randn(4, 6, seed=131),), {}, column_scale_reference, {}),
    "gram_matrix_x_xT": (
        GramMatrix, (seeded_randn(5, 3, seed=132),), {}, gram_reference, {}),
    "matrix_square_nxn": (
        MatrixSquare, (seeded_randn(4, 4, seed=133),), {}, matrix_square_reference, {}),
    "sin_cos_outputs_lazy_grads": (
        SinCosLazyGrads, (seeded_randn(4, 6, seed=134),), {}, sincos_reference, {}),
    "layer_norm_returns_stats": (
        LayerNormWithStats, (seeded_randn(4, 6, seed=135), 1 + 0.1 * seeded_randn(6, seed=136),
                             0.1 * seeded_randn(6, seed=137)), {}, layer_norm_with_stats_reference, {}),
    "softplus_keyword_only_defaults": (
        softplus_keyword_only, (seeded_randn(4, 6, seed=138),), {"beta": 2.0}, softplus_reference, {}),
    "affine_keyword_only_tensor": (
        affine_keyword_tensor, (seeded_randn(4, 6, seed=139),), {"weight": seeded_randn(6, seed=140), "scale": 0.5},
        affine_reference, {}),
    "weighted_sum_star_args": (
        weighted_sum, (seeded_randn(3, 5, seed=141), seeded_randn(3, 5, seed=142), seeded_randn(3, 5, seed=143)),
        {}, weighted_sum_reference, {}),
    "double_in_place_mark_dirty": (
        DoubleInPlace, (seeded_randn(4, 6, seed=144),), {}, double_reference, {}),
    "sigmoid_in_place_mark_dirty": (
        SigmoidInPlace, (seeded_randn(4, 6, seed=145),), {}, sigmoid_reference, {}),
    "transposed_output_view": (
        TransposedOutputLinear, (seeded_randn(5, 4, seed=146), seeded_randn(3, 4, seed=147)), {},
        linear_no_bias_reference, {}),
    "row_mean_expanded_output": (
        RowMeanBroadcast, (seeded_randn(4, 6, seed=148),), {}, row_mean_broadcast_reference, {}),
    "mse_loss_0dim": (
        MSELoss, (seeded_randn(4, 6, seed=149), seeded_randn(4, 6, seed=150)), {}, mse_reference, {}),
    "cross_entropy_int_targets_0dim": (
        CrossEntropyMean, (seeded_randn(5, 7, seed=151), randint(7, (5,), seed=152)), {}, cross_entropy_reference, {}),
    "max_with_nondifferentiable_indices": (
        MaxWithIndex, (seeded_randn(4, 6, seed=153),), {}, max_with_index_reference, {}),
    "add_returns_one_grad_for_both": (
        AddSharedGrad, (seeded_randn(4, 6, seed=154), seeded_randn(4, 6, seed=155)), {}, add_reference, {}),
    "embedding_repeated_indices": (
        Embedding, (seeded_randn(7, 4, seed=156), randint(7, (3, 5), seed=157)), {}, embedding_reference, {}),
    "rounded_offset_zero_grad": (
        RoundedOffset, (seeded_randn(4, 6, seed=158), 3 * seeded_randn(4, 6, seed=159)), {},
        rounded_offset_reference, {}),
    "floor_offset_none_for_zero_grad": (
        FloorOffsetNoneGrad, (seeded_randn(4, 6, seed=160), 3 * seeded_randn(4, 6, seed=161)), {},
        floor_offset_reference, {}),
    "unflatten_contiguous_backward": (
        UnflattenTriple, (seeded_randn(3, 8, seed=162), 4), {}, unflatten_triple_reference, {}),
    "row_sum_expanded_grad": (
        RowSumExpandedGrad, (seeded_randn(4, 6, seed=163),), {}, row_sum_reference, {}),
    "mul_add_needs_input_grad": (
        MulAddNeedsInputGrad, (seeded_randn(4, 6, seed=164), seeded_randn(4, 6, seed=165),
                               seeded_randn(4, 6, seed=166)), {}, mul_add_reference, {}),
    "triton_leaky_relu": (
        TritonLeakyReLU, (seeded_randn(4, 6, seed=167), 0.1), {}, leaky_relu_reference, {}),
    "triton_square_hardened": (
        hardened_ops.TritonSquare, (seeded_randn(4, 6, seed=168),), {}, square_reference, {}),
}


# ===========================================================================
# PLANTED CASES (one bug each; `trap` names its cause)
# ===========================================================================

class SiluStrideZeroFastPath(Function):
    """Planted: a fast path takes one value of grad_output whenever its last stride is 0: right for the all-zero
    strides of .sum(), wrong for the (1, 0) strides that .sum(dim=-1) hands on."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return F.silu(x)

    @staticmethod
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        if grad_out.dim() and grad_out.stride(-1) == 0:
            # "an expanded grad_output, as after .sum(): one value serves every element"
            return grad_out[(0,) * grad_out.dim()] * silu_derivative(x)  # BUG: (1, 0) is constant along rows only
        return grad_out * silu_derivative(x)


class NormalizeFrozenWeightInPlace(Function):
    """Planted: when the weight is frozen, it is normalized in place (w /= |w|), overwriting the caller's tensor."""
    @staticmethod
    def forward(ctx, x, weight):
        norm = weight.norm()
        if ctx.needs_input_grad[1]:
            unit = weight / norm
        else:
            unit = weight.div_(norm)  # BUG: "frozen, so no graph to keep": writes into the input
        ctx.save_for_backward(x, unit, norm)
        return x * unit

    @staticmethod
    def backward(ctx, grad_out):
        x, unit, norm = ctx.saved_tensors
        grad_unit = grad_out * x
        return grad_out * unit, (grad_unit - unit * (grad_unit * unit).sum()) / norm


def normalized_weight_reference(x, weight):
    return x * (weight / weight.norm())


class MulSharedWorkspace(Function):
    """Planted: x * y whose backward writes both gradients into one workspace and returns it twice
    (grad_x ends up holding grad_y's values)."""
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, grad_out):
        x, y = ctx.saved_tensors
        workspace = torch.empty(grad_out.shape, dtype=grad_out.dtype, device=grad_out.device)
        grad_x = torch.mul(grad_out, y, out=workspace)
        grad_y = torch.mul(grad_out, x, out=workspace)  # BUG: the same buffer again
        return grad_x, grad_y


def mul_reference(x, y):
    return x * y


class ExpSinUnusedCrashes(Function):
    """Planted: two outputs with set_materialize_grads(False); the backward multiplies both grad_outputs
    unchecked, so it raises when an output is unused (its grad_output is None)."""
    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        e = torch.exp(x)
        ctx.save_for_backward(x, e)
        return e, torch.sin(x)

    @staticmethod
    def backward(ctx, grad_exp, grad_sin):
        x, e = ctx.saved_tensors
        return grad_exp * e + grad_sin * torch.cos(x)  # BUG: either may be None


def exp_sin_reference(x):
    return torch.exp(x), torch.sin(x)


class RowMeanDimMixup(Function):
    """Planted: the mean over dim 1 divides its gradient by x.shape[0] instead of x.shape[1]; the square
    input given hides it."""
    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        return x.mean(1)

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out.unsqueeze(1).expand(ctx.shape) / ctx.shape[0]  # BUG: shape[1]


def row_mean_reference(x):
    return x.mean(1)


class SinCosDropsSecond(Function):
    """Planted: (sin x, cos x) whose backward uses only the first output's grad_output."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x), torch.cos(x)

    @staticmethod
    def backward(ctx, grad_sin, grad_cos):
        x, = ctx.saved_tensors
        return grad_sin * torch.cos(x)  # BUG: - grad_cos * sin(x) is missing


TOKEN_SHIFT_BLOCK = 500


class TokenShiftBlockHalo(Function):
    """Planted: a token shift y[i] = x[i-1] whose backward works in 500-element blocks and forgets each block's
    halo: the last element of every full block but the final one gets 0 (3 of 2000 elements 100% wrong)."""
    @staticmethod
    def forward(ctx, x):
        return F.pad(x[..., :-1], (1, 0))

    @staticmethod
    def backward(ctx, grad_out):
        n = grad_out.shape[-1]
        grad_x = grad_out.new_zeros(grad_out.shape)
        for start in range(0, n, TOKEN_SHIFT_BLOCK):
            stop = min(start + TOKEN_SHIFT_BLOCK, n)
            grad_x[..., start:stop - 1] = grad_out[..., start + 1:stop]
            # BUG: grad_x[..., stop - 1] needs grad_out[..., stop], from the next block
        return grad_x


def token_shift_reference(x):
    return F.pad(x[..., :-1], (1, 0))


class SquareViewsSavedInput(Function):
    """Planted: the backward flattens the saved x with .view(-1), which raises when x was transposed."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        return (grad_out.reshape(-1) * 2 * x.view(-1)).view(x.shape)  # BUG: view needs a contiguous x


class MeanWrongCount(Function):
    """Planted: a row mean whose forward divides by D - 1 (copied from an unbiased variance); the backward
    (g / D) and the reference are right."""
    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        return x.sum(-1) / (x.shape[-1] - 1)  # BUG: x.shape[-1]

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out.unsqueeze(-1).expand(ctx.shape) / ctx.shape[-1]


def last_dim_mean_reference(x):
    return x.mean(-1)


class FusedCrossEntropyFirstElement(Function):
    """Planted: per-row cross-entropy that computes its gradient in the forward and scales it in place in the
    backward (Liger-style, by design) by grad_output[0] for every row. Traps it has: its main bug, the one it is
    listed under, "assumes a uniform grad_output" (grad_output[0]); besides, the by-design in-place scale
    of the saved gradient is "writes into an input or a saved tensor" (a second backward through the graph
    with retain_graph=True then fails on the changed saved tensor)."""
    @staticmethod
    def forward(ctx, logits, target):
        logp = torch.log_softmax(logits, -1)
        grad = logp.exp() - F.one_hot(target, logits.shape[-1]).to(logits.dtype)
        ctx.save_for_backward(grad)
        return -logp.gather(-1, target[:, None]).squeeze(-1)

    @staticmethod
    def backward(ctx, grad_out):
        grad, = ctx.saved_tensors
        grad.mul_(grad_out[0])  # by design: in place, no new buffer; BUG: grad_out[:, None], not grad_out[0]
        return grad, None


def cross_entropy_per_row_reference(logits, target):
    return F.cross_entropy(logits, target, reduction="none")


class SoftplusNoChainRule(Function):
    """Planted: the classic chain-rule bug: returns sigmoid(x), never multiplied by grad_output."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return F.softplus(x)

    @staticmethod
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        return torch.sigmoid(x)  # BUG: grad_out * sigmoid(x)


class TanhFirstElement(Function):
    """Planted: scales by grad_output's first element for every element."""
    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_out):
        y, = ctx.saved_tensors
        return grad_out.reshape(-1)[0] * (1 - y * y)  # BUG: grad_out * (1 - y*y)


class SigmoidMeanGrad(Function):
    """Planted: scales by grad_output.mean() instead of grad_output (right only for uniform grad_outputs)."""
    @staticmethod
    def forward(ctx, x):
        y = torch.sigmoid(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_out):
        y, = ctx.saved_tensors
        return grad_out.mean() * y * (1 - y)  # BUG


class CubeCachedDerivative(Function):
    """Planted: caches the derivative 3x^2 on the class, keyed by shape: later calls of that shape reuse the
    first call's derivative."""
    _derivatives = {}

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        key = (tuple(x.shape), x.dtype, x.device)
        if key not in CubeCachedDerivative._derivatives:  # BUG: keyed by shape, not by values
            CubeCachedDerivative._derivatives[key] = 3 * x * x
        return grad_out * CubeCachedDerivative._derivatives[key]


def cube_plain_reference(x):
    return x ** 3


class SinMutatesGradOutput(Function):
    """Planted: the backward multiplies grad_output in place and returns it."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        return grad_out.mul_(torch.cos(x))  # BUG: writes into grad_output


class ExpHardCodedGradStrides(Function):
    """Planted: reads grad_output through as_strided with hard-coded contiguous strides (as a kernel given only
    its data pointer would): wrong for transposed or sliced grad_outputs, raises for expanded ones."""
    @staticmethod
    def forward(ctx, x):
        y = torch.exp(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_out):
        y, = ctx.saved_tensors
        g = grad_out.as_strided(grad_out.shape, contiguous_strides(grad_out.shape))  # BUG
        return g * y


class UnflattenViewBackward(Function):
    """Planted: (B, N) -> (B, groups, N/groups) of 2x whose backward calls grad_output.view(B, N) without
    .contiguous(): it raises for transposed, sliced or (1, 0)-strided grad_outputs."""
    @staticmethod
    def forward(ctx, x, groups):
        ctx.shape = x.shape
        return (2 * x).reshape(x.shape[0], groups, x.shape[1] // groups)

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out.view(ctx.shape) * 2, None  # BUG: needs .contiguous() (or reshape)


def unflatten_double_reference(x, groups):
    return (2 * x).reshape(x.shape[0], groups, x.shape[1] // groups)


class TritonLeakyReLUFloorGrid(Function):
    """Planted: the backward launches max(1, n // BLOCK) programs instead of cdiv(n, BLOCK): inputs under one
    block are right, larger ones keep a zero gradient on their ragged tail."""
    @staticmethod
    def forward(ctx, x, slope):
        ctx.save_for_backward(x)
        ctx.slope = slope
        return _leaky_forward(x, slope)

    @staticmethod
    @hardened_ops.no_double_backward
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        grad_out, x = hardened_ops.kernel_operands(grad_out, x)
        grad_in = torch.zeros_like(x)
        n = x.numel()
        grid = (max(1, n // LEAKY_BLOCK),)  # BUG: triton.cdiv(n, LEAKY_BLOCK)
        with hardened_ops.device_of(x):
            leaky_relu_backward_kernel[grid](grad_out, x, grad_in, n, ctx.slope, BLOCK=LEAKY_BLOCK)
        return grad_in, None


GELU_CHUNK = 1024


class GeluTanhWholeChunksOnly(Function):
    """Planted: the backward walks the flattened input in 1024-element chunks, but past one chunk only over whole
    chunks: the ragged tail keeps a zero gradient."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return F.gelu(x, approximate="tanh")

    @staticmethod
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        g = grad_out.reshape(-1)
        d = gelu_tanh_derivative(x).reshape(-1)
        n = d.numel()
        if n <= GELU_CHUNK:
            return (g * d).view(x.shape)
        grad_x = torch.zeros_like(d)
        for start in range(0, n - GELU_CHUNK + 1, GELU_CHUNK):  # BUG: stops before the ragged tail
            grad_x[start:start + GELU_CHUNK] = g[start:start + GELU_CHUNK] * d[start:start + GELU_CHUNK]
        return grad_x.view(x.shape)


def gelu_tanh_reference(x):
    return F.gelu(x, approximate="tanh")


_WORKSPACES = {}


class HalfSquareReusedWorkspace(Function):
    """Planted: x^2 / 2 whose backward writes its gradient into a module-level workspace per shape and returns
    it: the next call of that shape overwrites a gradient returned earlier."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return 0.5 * x * x

    @staticmethod
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        key = (tuple(x.shape), x.dtype, x.device)
        if key not in _WORKSPACES:
            _WORKSPACES[key] = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        return torch.mul(grad_out, x, out=_WORKSPACES[key])  # BUG: the returned gradient is reused


def half_square_reference(x):
    return 0.5 * x * x


class MulCompactsGradTuple(Function):
    """Planted: returns only the gradients needs_input_grad asks for, compacted: with one input frozen it
    returns one gradient for two inputs (autograd raises)."""
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, grad_out):
        x, y = ctx.saved_tensors
        grads = []
        if ctx.needs_input_grad[0]:
            grads.append(grad_out * y)
        if ctx.needs_input_grad[1]:
            grads.append(grad_out * x)
        return tuple(grads)  # BUG: None placeholders are needed


class LinearForgetsBiasGrad(Function):
    """Planted: y = x @ w.T + b whose backward returns None for the bias, which needs a gradient."""
    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return x @ weight.t() + bias

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        return grad_out @ weight, grad_out.t() @ x, None  # BUG: grad_out.sum(0)


class ExpReadsStorageFlat(Function):
    """Planted: reads x as one flat run of its storage (x.as_strided((n,), (1,)), as a flat kernel launched
    without .contiguous()): a transposed input gives permuted values, forward and backward."""
    @staticmethod
    def forward(ctx, x):
        flat = x.as_strided((x.numel(),), (1,))  # BUG: assumes x is contiguous
        y = torch.exp(flat).view(x.shape)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_out):
        y, = ctx.saved_tensors
        return grad_out * y


class XExpXDetachedExp(Function):
    """Planted: x * exp(x) whose backward takes exp from the detached input: first order right, but under
    create_graph the second derivative silently misses the (1 + x) * exp(x) term."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.exp(x)

    @staticmethod
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        return grad_out * (1 + x) * torch.exp(x.detach())  # BUG: the detach cuts part of the graph


class TanhHalfDetached(Function):
    """Planted: tanh whose backward uses 1 - y * y.detach(): first order right, the second derivative is half
    of what it should be."""
    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_out):
        y, = ctx.saved_tensors
        return grad_out * (1 - y * y.detach())  # BUG: one factor carries no graph


class SoftsignGradWithInputStrides(Function):
    """Planted: reads grad_output with the saved input's strides (as a kernel that passes x's strides for both
    pointers): wrong when the two are laid out differently (x transposed, grad_output contiguous)."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x / (1 + x.abs())

    @staticmethod
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        g = grad_out.as_strided(x.shape, x.stride(), grad_out.storage_offset())  # BUG
        return g / (1 + x.abs()) ** 2


class SquareFreesCache(Function):
    """Planted: the backward frees its cached derivative (del ctx.derivative) after one use: a second backward
    through the graph, as when an output feeds two losses backpropagated in turn (retain_graph=True), raises."""
    @staticmethod
    def forward(ctx, x):
        ctx.derivative = 2 * x
        return x * x

    @staticmethod
    def backward(ctx, grad_out):
        derivative = ctx.derivative
        del ctx.derivative  # BUG: "free memory early": the graph may be backpropagated again
        return grad_out * derivative


class CosForgotUnpack(Function):
    """Planted: `x = ctx.saved_tensors` without the unpacking comma: the backward raises on every call."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.cos(x)

    @staticmethod
    def backward(ctx, grad_out):
        x = ctx.saved_tensors  # BUG: a tuple
        return -grad_out * torch.sin(x)


class TwiceExpUnusedAsOnes(Function):
    """Planted: (2x, exp x) with set_materialize_grads(False); a None grad_output (unused output) is replaced by
    ones instead of zeros, as if that output fed a .sum()."""
    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        e = torch.exp(x)
        ctx.save_for_backward(e)
        return 2 * x, e

    @staticmethod
    def backward(ctx, grad_twice, grad_exp):
        e, = ctx.saved_tensors
        if grad_twice is None:
            grad_twice = torch.ones_like(e)  # BUG: zeros (or skip the term)
        if grad_exp is None:
            grad_exp = torch.ones_like(e)  # BUG: likewise
        return 2 * grad_twice + grad_exp * e


def twice_exp_reference(x):
    return 2 * x, torch.exp(x)


class SoftmaxBackwardOverwritesOutput(Function):
    """Planted: the backward computes its result in place in the saved output y, the caller's output tensor,
    which is left holding the gradient."""
    @staticmethod
    def forward(ctx, x):
        y = torch.softmax(x, -1)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_out):
        y, = ctx.saved_tensors
        inner = (grad_out * y).sum(-1, keepdim=True)
        return y.mul_(grad_out - inner)  # BUG: writes into the saved output


class MulNeedsInputGradTypo(Function):
    """Planted: both gradients are gated on needs_input_grad[0]: with x frozen, y gets None though it needs one."""
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, grad_out):
        x, y = ctx.saved_tensors
        grad_x = grad_out * y if ctx.needs_input_grad[0] else None
        grad_y = grad_out * x if ctx.needs_input_grad[0] else None  # BUG: [1]
        return grad_x, grad_y


class RMSNormMissingTerm(Function):
    """Planted: RMSNorm whose input gradient omits the term through the normalizer, g * w * rstd only."""
    @staticmethod
    def forward(ctx, x, weight):
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        ctx.save_for_backward(x, weight, rstd)
        return x * rstd * weight

    @staticmethod
    def backward(ctx, grad_out):
        x, weight, rstd = ctx.saved_tensors
        grad_x = grad_out * weight * rstd  # BUG: - xhat * mean(g * w * xhat) * rstd is missing
        grad_w = (grad_out * x * rstd).reshape(-1, x.shape[-1]).sum(0)
        return grad_x, grad_w


BLIND_PLANTED = {
    "silu_stride_zero_fast_path": (
        SiluStrideZeroFastPath, (seeded_randn(4, 6, seed=201),), {}, F.silu, {},
        "assumes a contiguous grad_output"),
    "normalizes_frozen_weight_in_place": (
        NormalizeFrozenWeightInPlace, (seeded_randn(4, 6, seed=202), seeded_randn(4, 6, seed=203)), {},
        normalized_weight_reference, {}, "writes into an input or a saved tensor"),
    "mul_shared_workspace": (
        MulSharedWorkspace, (seeded_randn(4, 6, seed=204), seeded_randn(4, 6, seed=205)), {}, mul_reference, {},
        "returns the wrong gradients"),
    "exp_sin_unused_output_crashes": (
        ExpSinUnusedCrashes, (seeded_randn(4, 6, seed=206),), {}, exp_sin_reference, {},
        "assumes every output is used"),
    "row_mean_dim_mixup_square": (
        RowMeanDimMixup, (seeded_randn(5, 5, seed=207),), {}, row_mean_reference, {}, "a wrong formula"),
    "sin_cos_drops_second_output": (
        SinCosDropsSecond, (seeded_randn(4, 6, seed=208),), {}, sincos_reference, {}, "ignores grad_output"),
    "token_shift_block_halo_3_of_2000": (
        TokenShiftBlockHalo, (seeded_randn(2000, seed=209),), {}, token_shift_reference, {}, "a wrong formula"),
    "square_views_saved_input": (
        SquareViewsSavedInput, (seeded_randn(4, 6, seed=210),), {}, square_reference, {},
        "assumes a contiguous input"),
    "mean_forward_wrong_count": (
        MeanWrongCount, (seeded_randn(4, 6, seed=211),), {}, last_dim_mean_reference, {}, "a wrong forward"),
    # Two traps: "assumes a uniform grad_output" (its main bug, listed) and the by-design in-place scale of its
    # saved gradient, "writes into an input or a saved tensor".
    "fused_cross_entropy_first_element": (
        FusedCrossEntropyFirstElement, (seeded_randn(5, 7, seed=212), randint(7, (5,), seed=213)), {},
        cross_entropy_per_row_reference, {}, "assumes a uniform grad_output"),
    "softplus_no_chain_rule": (
        SoftplusNoChainRule, (seeded_randn(4, 6, seed=214),), {}, F.softplus, {}, "ignores grad_output"),
    "triton_gelu_no_chain_rule": (
        hardened_ops.TritonGELUBuggy, (seeded_randn(4, 6, seed=215),), {}, gelu_reference, {},
        "ignores grad_output"),
    "tanh_grad_output_first_element": (
        TanhFirstElement, (seeded_randn(4, 6, seed=216),), {}, None, {}, "assumes a uniform grad_output"),
    "sigmoid_grad_output_mean": (
        SigmoidMeanGrad, (seeded_randn(4, 6, seed=217),), {}, torch.sigmoid, {}, "assumes a uniform grad_output"),
    "cube_derivative_cached_on_class": (
        CubeCachedDerivative, (seeded_randn(4, 6, seed=218),), {}, cube_plain_reference, {},
        "keeps state between calls"),
    "sin_mutates_grad_output": (
        SinMutatesGradOutput, (seeded_randn(4, 6, seed=219),), {}, torch.sin, {}, "mutates grad_output in place"),
    "exp_hard_coded_grad_strides": (
        ExpHardCodedGradStrides, (seeded_randn(4, 6, seed=220),), {}, torch.exp, {},
        "assumes a contiguous grad_output"),
    "unflatten_view_without_contiguous": (
        UnflattenViewBackward, (seeded_randn(3, 8, seed=221), 4), {}, unflatten_double_reference, {},
        "assumes a contiguous grad_output"),
    "triton_leaky_relu_floor_grid": (
        TritonLeakyReLUFloorGrid, (seeded_randn(4, 6, seed=222), 0.1), {}, leaky_relu_reference, {},
        "covers only part of a large input"),
    "gelu_tanh_whole_chunks_only": (
        GeluTanhWholeChunksOnly, (seeded_randn(3, 1500, seed=223),), {}, gelu_tanh_reference, {},
        "covers only part of a large input"),
    "half_square_reused_workspace": (
        HalfSquareReusedWorkspace, (seeded_randn(4, 6, seed=224),), {}, half_square_reference, {},
        "keeps state between calls"),
    "mul_compacts_grad_tuple": (
        MulCompactsGradTuple, (seeded_randn(4, 6, seed=225), seeded_randn(4, 6, seed=226)), {}, mul_reference, {},
        "returns the wrong gradients"),
    "linear_forgets_bias_grad": (
        LinearForgetsBiasGrad, (seeded_randn(5, 4, seed=227), seeded_randn(3, 4, seed=228), seeded_randn(3, seed=229)),
        {}, linear_reference, {}, "returns the wrong gradients"),
    "mul_needs_input_grad_typo": (
        MulNeedsInputGradTypo, (seeded_randn(4, 6, seed=230), seeded_randn(4, 6, seed=231)), {}, mul_reference, {},
        "returns the wrong gradients"),
    "exp_reads_storage_flat": (
        ExpReadsStorageFlat, (seeded_randn(4, 6, seed=232),), {}, torch.exp, {}, "assumes a contiguous input"),
    "x_exp_x_detached_exp": (
        XExpXDetachedExp, (seeded_randn(4, 6, seed=233),), {}, lambda x: x * torch.exp(x), {"second_order": True},
        "a silently wrong second derivative"),
    "tanh_half_detached": (
        TanhHalfDetached, (seeded_randn(4, 6, seed=234),), {}, torch.tanh, {"second_order": True},
        "a silently wrong second derivative"),
    "softsign_grad_with_input_strides": (
        SoftsignGradWithInputStrides, (seeded_randn(4, 6, seed=235),), {}, softsign_reference, {},
        "assumes grad_output is laid out like its input"),
    "cos_forgot_unpack": (
        CosForgotUnpack, (seeded_randn(4, 6, seed=237),), {}, torch.cos, {}, "crashes"),
    "twice_exp_unused_as_ones": (
        TwiceExpUnusedAsOnes, (seeded_randn(4, 6, seed=238),), {}, twice_exp_reference, {},
        "assumes every output is used"),
    "softmax_backward_overwrites_output": (
        SoftmaxBackwardOverwritesOutput, (seeded_randn(4, 6, seed=239),), {}, softmax_reference, {},
        "writes into an input or a saved tensor"),
    "rmsnorm_missing_normalizer_term": (
        RMSNormMissingTerm, (seeded_randn(4, 8, seed=240), 1 + 0.1 * seeded_randn(8, seed=241)), {},
        lambda x, weight: rmsnorm_reference(x, weight), {}, "a wrong formula"),
}


# Reclassified by the maintainer from planted ("assumes a single use") to legal: a second backward over one graph
# that raises loudly is the refusal PyTorch's own ops make once they free what they saved; every single backward it
# gives is right, and the checker notes the refusal.
BLIND_LEGAL["square_frees_cache_after_one_backward"] = (
    SquareFreesCache, (seeded_randn(4, 6, seed=236),), {}, square_reference, {})

# Traps a planted case also has, besides the one it is listed with (each named in the case's comment).
BLIND_ALSO = {"fused_cross_entropy_first_element": ("writes into an input or a saved tensor",)}
# Legal cases the checker cannot decide, and why that is the honest answer.
BLIND_UNDECIDABLE = {"pairwise_distance_once_differentiable": "its reference, torch.cdist, has no double backward, "
                                                               "so nothing can judge the op's create_graph=True"}
