"""Families of zoo cases, each buildable at any shape, dtype, seed and scale, for the property tests
(tests/test_checker_properties.py). The fixed zoos (checker_zoo.py, checker_zoo_planted.py) judge each case at
one small size; a family says what the checker must report at EVERY size it takes, across block boundaries.

A Family: name; legal; traps (the exact set the checker must name, empty for a legal one); the dtypes, ranks
and scales it takes; make(shape, dtype, seed, scale) -> Case(op, args, kwargs, reference, options), where
options are check_backward's own (no_grad=...); size_rule(shape) where the right verdict depends on the size;
undecided_ok, the reason a legal case may come back with a ?? line instead of clean; pending, the checker
change a family waits for (it is never weakened to pass). Every family's claim is proved without the checker
by tests/checker_zoo_families_probes.py.

The letters (a) to (j) are the classes of the brief that asked for them: elementwise block kernels,
normalisers, exactly-zero true gradients, outputs of very different scales, -inf masks, saturating functions,
row-padded views, TF32, selection, value range; (k) and (l) judge low precision by the op's own noise (float16
and bfloat16 attention, chunked float32 scans), and (m) holds the names a hidden probe found wrong: a
normaliser that ignores grad_output, a gradient of the wrong dtype, a 1-D kernel that reads grad_output with
its input's strides, a branch wrong only far below 0.
"""
import dataclasses
import math
from typing import Callable

import torch
import torch.nn.functional as F
import triton
from chapter_scripts import DEVICE, hardened_ops
from checker_zoo import dgelu, gelu, one_input, square, triton_gelu

BLOCK = 1024          # the chapter's block (and the planted grids' own): a grid's bugs show past it
GROWN_NUMEL = 3 * BLOCK + 1  # the checker grows inputs smaller than this past several blocks (strategies.py)

IGNORES = "ignores grad_output"
UNIFORM = "assumes a uniform grad_output"
WRONG_FORMULA = "a wrong formula"
COVERS_PART = "covers only part of a large input"
CONTIGUOUS_INPUT = "assumes a contiguous input"
LAID_OUT_LIKE_INPUT = "assumes grad_output is laid out like its input"
RETURNS_WRONG = "returns the wrong gradients"

F64, F32, BF16, F16 = torch.float64, torch.float32, torch.bfloat16, torch.float16
SCALES = (1e-3, 1.0, 1e3)


@dataclasses.dataclass(frozen=True)
class Case:
    op: object
    args: tuple
    kwargs: dict
    reference: object
    options: dict


@dataclasses.dataclass(frozen=True)
class Family:
    name: str
    cls: str                      # the brief's class, "a" to "j"
    legal: bool
    traps: frozenset
    dtypes: tuple
    ranks: tuple
    make: Callable                # make(shape, dtype, seed, scale) -> Case
    why: str                      # the trap it plants, or why it is legal
    scales: tuple = SCALES
    size_rule: Callable = None    # size_rule(shape) -> the expected traps, where they depend on the size
    undecided_ok: str = ""        # why a ?? line is an acceptable verdict for this legal family ("" = never)
    max_numel: int = 5000         # the largest given input it takes (finite differences cost 4 calls an element)
    pending: str = ""             # a checker change it waits for
    probe_rtol: dict = None       # the legal probe's tolerance by dtype (relative to the largest gradient)

    def expected(self, shape):
        return frozenset(self.size_rule(tuple(shape))) if self.size_rule else self.traps


# ---------------------------------------------------------------------------------------------
# Inputs: every draw from a CPU generator seeded by (seed, salt), then moved to DEVICE
# ---------------------------------------------------------------------------------------------

def generator(seed, salt=0):
    return torch.Generator(device="cpu").manual_seed(1_000_003 * salt + seed)


def draw(shape, dtype, seed, scale=1.0, salt=0):
    """scale * N(0, 1), drawn in float64 and rounded once to dtype (as seeded_randn draws, on the CPU)."""
    x = torch.randn(tuple(shape), generator=generator(seed, salt), dtype=F64) * scale
    return x.to(dtype).to(DEVICE)


def rows_of(shape):
    return math.prod(shape[:-1]), shape[-1]


def numel(shape):
    return math.prod(shape)


def grows(shape):
    """Whether the checker grows a lone input of this shape (strategies.growth_plans, as documented there):
    below GROWN_NUMEL elements, and some dimension above 1 that is not a multiple of 16 (those are kept)."""
    return numel(shape) < GROWN_NUMEL and any(s > 1 and not (s >= 16 and s % 16 == 0) for s in shape)


# Bit patterns 0x3800..0x42ff of bfloat16: 2816 distinct positive values from 2**-15 to 128, and their negatives.
_BF16_POOL = torch.arange(0x3800, 0x4300, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).double()
BF16_POOL = torch.cat([_BF16_POOL, -_BF16_POOL])


def distinct_rows(shape, dtype, seed, scale):
    """Values distinct within every row (top-k has no ties to break), exactly representable in dtype. scale
    must be a power of two so that scaling keeps them distinct; float32/float64: normal draws, checked."""
    rows, d = rows_of(shape)
    g = generator(seed, 9)
    if dtype == BF16:
        if d > BF16_POOL.numel():
            raise ValueError(f"rows of {d} cannot hold distinct bfloat16 values from the pool")
        x = torch.stack([BF16_POOL[torch.randperm(BF16_POOL.numel(), generator=g)[:d]] for _ in range(rows)])
    else:
        x = torch.randn(rows, d, generator=g, dtype=F64).to(dtype).double()
    x = (x * scale).to(dtype)
    assert all(len(set(r.tolist())) == d for r in x), "ties in a row"
    return x.reshape(shape).to(DEVICE)


# ---------------------------------------------------------------------------------------------
# (a) Elementwise block kernels: GELU through hardened_ops' Triton kernels
# ---------------------------------------------------------------------------------------------

def gelu_backward_grid_short(x, g):
    """BUG: launches cdiv(n, BLOCK) - 1 blocks (at least one): the last block, the tail, is never computed."""
    x, g = x.contiguous(), g.contiguous()
    grad = torch.zeros_like(x)
    n = x.numel()
    hardened_ops.gelu_backward_kernel[(max(1, triton.cdiv(n, BLOCK) - 1),)](g, x, grad, n, BLOCK=BLOCK)
    return grad


def gelu_backward_mask_short(x, g):
    """BUG: the whole grid, but the mask is offsets < n - 1: the last element is never computed."""
    x, g = x.contiguous(), g.contiguous()
    grad = torch.zeros_like(x)
    n = x.numel()
    hardened_ops.gelu_backward_kernel[(triton.cdiv(n, BLOCK),)](g, x, grad, n - 1, BLOCK=BLOCK)
    return grad


GELUFirstElement = one_input(triton_gelu, lambda x, g: g.reshape(-1)[0] * dgelu(x), "GELUFirstElement")
GELUTimes102 = one_input(triton_gelu, lambda x, g: 1.02 * g * dgelu(x), "GELUTimes102")
GELUGridShort = one_input(triton_gelu, gelu_backward_grid_short, "GELUGridShort")
GELUMaskShort = one_input(triton_gelu, gelu_backward_mask_short, "GELUMaskShort")


def one_tensor(op, reference):
    def make(shape, dtype, seed, scale):
        return Case(op, (draw(shape, dtype, seed, scale),), {}, reference, {})
    return make


def grid_short_rule(shape):
    """Wrong only past the first block. Given more than one block, the given input shows it; given at most
    one, only the grown input can, and the checker grows only shapes with a size that is not a multiple of 16
    (so (1024,), (32, 32) and (4, 16, 16) stay unseen: clean, with the 'inputs not grown' note, is right)."""
    return {COVERS_PART} if numel(shape) > BLOCK or grows(shape) else set()


# ---------------------------------------------------------------------------------------------
# (b) Normalisers: under a uniform grad_output their gradient is 0
# ---------------------------------------------------------------------------------------------

class SoftmaxRows(torch.autograd.Function):
    """Legal: PyTorch's own softmax backward (aten._softmax_backward_data)."""
    @staticmethod
    def forward(ctx, x):
        y = torch.softmax(x, -1)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        y, = ctx.saved_tensors
        return torch.ops.aten._softmax_backward_data(g, y, -1, y.dtype)


class SoftmaxRowsForOnes(SoftmaxRows):
    """BUG: the gradient for grad_output = ones, which is ~0 (rounding): ignores grad_output."""
    @staticmethod
    def backward(ctx, g):
        y, = ctx.saved_tensors
        return torch.ops.aten._softmax_backward_data(torch.ones_like(g), y, -1, y.dtype)


LN_EPS = 1e-5


class LayerNorm(torch.autograd.Function):
    """Legal: PyTorch's own layer norm, forward and backward (aten.native_layer_norm[_backward])."""
    @staticmethod
    def forward(ctx, x, weight, bias):
        out, mean, rstd = torch.ops.aten.native_layer_norm(x, [x.shape[-1]], weight, bias, LN_EPS)
        ctx.save_for_backward(x, weight, bias, mean, rstd)
        return out

    @classmethod
    def backward(cls, ctx, g):
        x, weight, bias, mean, rstd = ctx.saved_tensors
        return tuple(torch.ops.aten.native_layer_norm_backward(cls.grad_output(g), x, [x.shape[-1]], mean,
                                                                 rstd, weight, bias, [True, True, True]))

    @staticmethod
    def grad_output(g):
        return g


class LayerNormForOnes(LayerNorm):
    """BUG: every gradient is the one for grad_output = ones (x's and weight's ~0, bias's the row count)."""
    @staticmethod
    def grad_output(g):
        return torch.ones_like(g)


def layer_norm_reference(x, weight, bias):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, LN_EPS)


def layer_norm_inputs(op):
    def make(shape, dtype, seed, scale):
        d = shape[-1]  # nn.LayerNorm's initial affine: weight ones, bias zeros
        weight, bias = torch.ones(d, dtype=dtype).to(DEVICE), torch.zeros(d, dtype=dtype).to(DEVICE)
        return Case(op, (draw(shape, dtype, seed, scale), weight, bias), {}, layer_norm_reference, {})
    return make


# ---------------------------------------------------------------------------------------------
# (c) Exactly-zero true gradients: a bias added before a batch norm (its gradient sums BN's to 0)
# ---------------------------------------------------------------------------------------------

BN_EPS = 1e-5
_ORDER = torch.Generator(device="cpu").manual_seed(12345)  # the op's own: the checker never seeds it


def bias_batch_norm_reference(x, b):
    z = (x + b).reshape(-1, x.shape[-1])
    return F.batch_norm(z, None, None, training=True, eps=BN_EPS).reshape(x.shape)


class BiasBatchNorm(torch.autograd.Function):
    """Legal: y = batch_norm(x + b) over every dimension but the last, through PyTorch's own kernels; b's
    gradient is the sum of x's over the batch, which is exactly 0, computed as rounding."""
    @staticmethod
    def forward(ctx, x, b):
        z = (x + b).reshape(-1, x.shape[-1])
        out, mean, invstd = torch.ops.aten.native_batch_norm(z, None, None, None, None, True, 0.0, BN_EPS)
        ctx.save_for_backward(z, mean, invstd)
        ctx.shape = x.shape
        return out.reshape(x.shape)

    @classmethod
    def backward(cls, ctx, g):
        z, mean, invstd = ctx.saved_tensors
        gz, _, _ = torch.ops.aten.native_batch_norm_backward(g.reshape(z.shape), z, None, None, None, mean, invstd,
                                                             True, BN_EPS, [True, False, False])
        return gz.reshape(ctx.shape), cls.bias_gradient(gz)

    @staticmethod
    def bias_gradient(gz):
        return gz.sum(0)


class BiasBatchNormZeros(BiasBatchNorm):
    """Legal: b's gradient returned as the exact zeros it is."""
    @staticmethod
    def backward(ctx, g):
        gx, _ = BiasBatchNorm.backward(ctx, g)
        return gx, torch.zeros(gx.shape[-1], dtype=gx.dtype, device=gx.device)


class BiasBatchNormNone(BiasBatchNorm):
    """Legal: b's gradient returned as None (autograd's zeros)."""
    @staticmethod
    def backward(ctx, g):
        gx, _ = BiasBatchNorm.backward(ctx, g)
        return gx, None


def permuted_sum(t):
    """A sum over dim 0 in an order that changes from call to call, as atomic adds land: the rows permuted by
    the op's own generator (never torch's global one, which the checker seeds alike for every call)."""
    order = torch.randperm(t.shape[0], generator=_ORDER).to(t.device)
    return t.index_select(0, order).sum(0)


class BiasBatchNormAtomic(BiasBatchNorm):
    """Legal: the batch norm backward written out, every sum over the batch in a varying order."""
    @staticmethod
    def backward(ctx, g):
        z, mean, invstd = ctx.saved_tensors
        g = g.reshape(z.shape)
        n = z.shape[0]
        xhat = (z - mean) * invstd
        gz = (g - permuted_sum(g) / n - xhat * permuted_sum(g * xhat) / n) * invstd
        return gz.reshape(ctx.shape), permuted_sum(gz)


def bias_batch_norm_inputs(op):
    def make(shape, dtype, seed, scale):
        return Case(op, (draw(shape, dtype, seed, scale), draw(shape[-1:], dtype, seed, 1.0, salt=1)), {},
                    bias_batch_norm_reference, {})
    return make


# ---------------------------------------------------------------------------------------------
# (d) Outputs of very different scales: (x * w, weight_decay * (w ** 2).sum())
# ---------------------------------------------------------------------------------------------

class ScaleWithDecay(torch.autograd.Function):
    """Legal: main = x * w and small = weight_decay * |w|^2, each output's gradient taken."""
    @staticmethod
    def forward(ctx, x, w, weight_decay: float):
        ctx.save_for_backward(x, w)
        ctx.weight_decay = weight_decay
        return x * w, weight_decay * (w * w).sum()

    @staticmethod
    def backward(ctx, g_main, g_small):
        x, w = ctx.saved_tensors
        return g_main * w, g_main * x + g_small * 2 * ctx.weight_decay * w, None


class ScaleDropsDecay(ScaleWithDecay):
    """BUG: the small output's part of w's gradient dropped, as if its grad_output were always 0."""
    @staticmethod
    def backward(ctx, g_main, g_small):
        x, w = ctx.saved_tensors
        return g_main * w, g_main * x, None


def scale_with_decay_reference(x, w, weight_decay):
    return x * w, weight_decay * (w * w).sum()


def decay_inputs(op, weight_decay):
    def make(shape, dtype, seed, scale):  # scale is x's (the main output's regime); w stays N(0, 1)
        return Case(op, (draw(shape, dtype, seed, scale), draw(shape, dtype, seed, 1.0, salt=2), weight_decay), {},
                    scale_with_decay_reference, {})
    return make


# ---------------------------------------------------------------------------------------------
# (e) Masks of -inf: a key-padding mask over the last dimension, taken with no gradient
# ---------------------------------------------------------------------------------------------

class MaskedSoftmax(torch.autograd.Function):
    """Legal: softmax(x + mask) with mask an additive 0 / -inf float tensor (no_grad) or a bool keep-mask."""
    @staticmethod
    def forward(ctx, x, mask):
        additive = mask if mask.is_floating_point() else \
            torch.zeros(mask.shape, dtype=x.dtype, device=x.device).masked_fill(~mask, float("-inf"))
        y = torch.softmax(x + additive, -1)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        y, = ctx.saved_tensors
        return y * (g - (g * y).sum(-1, keepdim=True)), None


def masked_softmax_reference(x, mask):
    additive = mask if mask.is_floating_point() else \
        torch.zeros(mask.shape, dtype=x.dtype, device=x.device).masked_fill(~mask, float("-inf"))
    return torch.softmax(x + additive, -1)


def keep_mask(d, seed):
    """About a third of the columns masked at random, never column 0 (no row is all -inf)."""
    keep = torch.rand(d, generator=generator(seed, 3)) >= 1 / 3
    keep[0] = True
    return keep


def masked_inputs(kind, with_reference):
    def make(shape, dtype, seed, scale):
        keep = keep_mask(shape[-1], seed)
        mask = keep if kind == "bool" else torch.zeros(shape[-1], dtype=dtype).masked_fill(~keep, float("-inf"))
        options = {"no_grad": ("mask",)} if kind == "float" else {}
        return Case(MaskedSoftmax, (draw(shape, dtype, seed, scale), mask.to(DEVICE)), {},
                    masked_softmax_reference if with_reference else None, options)
    return make


# ---------------------------------------------------------------------------------------------
# (f) Saturating functions, through PyTorch's own backward
# ---------------------------------------------------------------------------------------------

class Tanh(torch.autograd.Function):
    """Legal: PyTorch's own tanh backward from the saved output, (1 - y^2) g; 0 once y rounds to 1."""
    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        y, = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(g, y)


class LogSumExp(torch.autograd.Function):
    """Legal: logsumexp over the last dimension, its backward PyTorch's formula g * exp(x - lse)."""
    @staticmethod
    def forward(ctx, x):
        lse = torch.logsumexp(x, -1)
        ctx.save_for_backward(x, lse)
        return lse

    @staticmethod
    def backward(ctx, g):
        x, lse = ctx.saved_tensors
        return g.unsqueeze(-1) * torch.exp(x - lse.unsqueeze(-1))


def logsumexp_reference(x):
    return torch.logsumexp(x, -1)


def log_likelihoods(shape, dtype, seed, scale):
    """Log-likelihoods near -3000: -3000 + scale * N(0, 1), rounded once to dtype."""
    x = torch.randn(tuple(shape), generator=generator(seed), dtype=F64) * scale - 3000.0
    return Case(LogSumExp, (x.to(dtype).to(DEVICE),), {}, logsumexp_reference, {})


SATURATED = ("float32 keeps tanh(x) as exactly 1 past |x| ~ 9 and (1 - y^2) cancels before that, so the largest "
             "gradients of a saturated input can sit where the saved output's rounding moves them by more than "
             "float32's tolerance: the best float32 can do from y, a ?? line at worst, never a trap")
NEAR_3000 = ("at |lse| ~ 3000 float32's ulp is 2.4e-4, so exp(x - lse) carries ~1e-4 relative from lse's rounding "
             "alone, at float32's tolerance: the best float32 can do, a ?? line at worst, never a trap")
BF16_LSE = ("lse rounded to bfloat16 (ulp 0.03 near 8) moves every exp(x - lse) by up to 3%, beside the "
            "bfloat16 tolerance of 1.6%: the best bfloat16 can do, a ?? line at worst, never a trap")


# ---------------------------------------------------------------------------------------------
# (g) Row-padded input views: x = wide[..., :d] of a wider buffer, strides (..., D, 1) with D > d
# ---------------------------------------------------------------------------------------------

def read_as_rows(x):
    """A kernel that reads x's storage as rows of x.shape[-1] (row stride = shape[-1]), emulated in torch."""
    strides = [1]
    for s in reversed(x.shape[1:]):
        strides.insert(0, strides[0] * s)
    return torch.as_strided(x, x.shape, tuple(strides), x.storage_offset())


def maybe_contiguous(x):
    """flash-attn's wrapper: repairs only a last dimension that is not unit-stride (a transpose)."""
    return x if x.stride(-1) == 1 else x.contiguous()


class SquareRowsRepairsTranspose(torch.autograd.Function):
    """BUG: maybe_contiguous in front of a kernel that assumes row stride == shape[-1]: a transposed input is
    repaired, a row-padded view (stride(-1) == 1, row stride D > d) is read as if its rows were packed."""
    @staticmethod
    def forward(ctx, x):
        x = maybe_contiguous(x)
        ctx.save_for_backward(x)
        return read_as_rows(x) ** 2

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return 2 * read_as_rows(x) * g.contiguous()


class SquareRowsContiguous(torch.autograd.Function):
    """Legal: the same kernel, behind x.contiguous(), which repairs every layout."""
    @staticmethod
    def forward(ctx, x):
        x = x.contiguous()
        ctx.save_for_backward(x)
        return read_as_rows(x) ** 2

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return 2 * read_as_rows(x) * g.contiguous()


ROW_PAD = 5


def row_padded(op):
    def make(shape, dtype, seed, scale):
        wide = draw((*shape[:-1], shape[-1] + ROW_PAD), dtype, seed, scale)
        return Case(op, (wide[..., :shape[-1]],), {}, square, {})  # strides (..., d + ROW_PAD, 1)
    return make


ROW_PADDED_PENDING = ("the checker copies its inputs with clone(), which makes a row-padded view contiguous, and "
                      "tries only a transposed layout: it cannot see this until it lays inputs out row-padded")


# ---------------------------------------------------------------------------------------------
# (h) TF32: a float32 matmul whose backward rounds its operands to a 10-bit mantissa
# ---------------------------------------------------------------------------------------------

def tf32(t):
    """t rounded to TF32 (10 mantissa bits), to nearest with ties away from zero, as cvt.rna.tf32.f32 does."""
    bits = t.contiguous().view(torch.int32)
    return ((bits + 0x1000) & -0x2000).view(torch.float32)


MATMUL_N = 17


class MatmulTF32Backward(torch.autograd.Function):
    """Legal: x @ w in float32; the backward's two matmuls on TF32 operands (cuBLAS with allow_tf32)."""
    factor = 1.0

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w

    @classmethod
    def backward(cls, ctx, g):
        x, w = ctx.saved_tensors
        k = x.shape[-1]
        gx = tf32(g) @ tf32(w).t()
        gw = tf32(x.reshape(-1, k)).t() @ tf32(g.reshape(-1, w.shape[-1]))
        return cls.factor * gx, cls.factor * gw


class MatmulTF32Times102(MatmulTF32Backward):
    """BUG: the same backward, times 1.02."""
    factor = 1.02


class MatmulTF32Both(MatmulTF32Backward):
    """Legal: forward and backward both in TF32, as allow_tf32 makes every float32 matmul."""
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return tf32(x) @ tf32(w)


def matmul_inputs(op):
    def make(shape, dtype, seed, scale):
        return Case(op, (draw(shape, dtype, seed, scale), draw((shape[-1], MATMUL_N), dtype, seed, 1.0, salt=4)),
                    {}, torch.matmul, {})
    return make


TF32_NOTE = ("TF32 rounds each operand to 10 mantissa bits: the backward is ~5e-4 (relative) off float32's, past "
             "float32's 1e-4 tolerance, with a forward in full float32 to calibrate by; a ?? line that names TF32 is "
             "the honest answer")


# ---------------------------------------------------------------------------------------------
# (i) Selection: top-k of each row, the gradient scattered back
# ---------------------------------------------------------------------------------------------

TOP_K = 4


class TopK(torch.autograd.Function):
    """Legal: torch.topk's values; the backward scatters grad_output to the chosen positions."""
    @staticmethod
    def forward(ctx, x, k: int):
        values, index = torch.topk(x, k, dim=-1)
        ctx.save_for_backward(index)
        ctx.shape = x.shape
        return values

    @staticmethod
    def backward(ctx, g):
        index, = ctx.saved_tensors
        return torch.zeros(ctx.shape, dtype=g.dtype, device=g.device).scatter(-1, index, g), None


def topk_reference(x, k):
    return torch.topk(x, k, dim=-1).values


def topk_inputs(shape, dtype, seed, scale):
    return Case(TopK, (distinct_rows(shape, dtype, seed, scale), min(TOP_K, shape[-1])), {}, topk_reference, {})


# ---------------------------------------------------------------------------------------------
# (j) Value range: softplus, whose gradient sigmoid(x) is small, not negligible, for x in [-6, -4)
# ---------------------------------------------------------------------------------------------

BRANCH = -4.0


class Softplus(torch.autograd.Function):
    """Legal: softplus (F.softplus, linear past 20), gradient sigmoid(x) everywhere."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return F.softplus(x)

    @classmethod
    def backward(cls, ctx, g):
        x, = ctx.saved_tensors
        return g * cls.derivative(x)

    @staticmethod
    def derivative(x):
        return torch.sigmoid(x)


class SoftplusZeroBelow(Softplus):
    """BUG: a branch that takes sigmoid(x) as 0 for x < -4 (it is 0.0025 to 0.018 on [-6, -4))."""
    @staticmethod
    def derivative(x):
        return torch.where(x < BRANCH, torch.zeros_like(x), torch.sigmoid(x))


class SoftplusFlippedBelow(Softplus):
    """BUG: a branch that takes sigmoid(-x) (1 - sigmoid(x)) for x < -4: ~1 where the gradient is ~0.01."""
    @staticmethod
    def derivative(x):
        return torch.where(x < BRANCH, torch.sigmoid(-x), torch.sigmoid(x))


def band_and_bulk(shape, dtype, seed, scale):
    """A third of the elements in [-6, -4) (whatever the scale), the rest scale * N(0, 1) (large gradients,
    ~0.5 at small scale, 0 or 1 at large), in a seeded random order."""
    n = numel(shape)
    g = generator(seed, 5)
    band = n // 3 + 1 if n > 1 else 1
    values = torch.cat([-6.0 + 2.0 * torch.rand(band, generator=g, dtype=F64),
                        torch.randn(n - band, generator=g, dtype=F64) * scale])
    x = values[torch.randperm(n, generator=g)]
    return Case(None, (x.reshape(shape).to(dtype).to(DEVICE),), {}, F.softplus, {})


def softplus_inputs(op):
    def make(shape, dtype, seed, scale):
        case = band_and_bulk(shape, dtype, seed, scale)
        return dataclasses.replace(case, op=op)
    return make


# ---------------------------------------------------------------------------------------------
# (k) Attention in float16 and bfloat16: softmax(q k^T / sqrt(d) + mask) v, as fused kernels compute it
# ---------------------------------------------------------------------------------------------

KEY_BLOCK = 16  # the blocked pattern's block of queries and keys


def attention_mask(length, blocked, device):
    """Which keys each query attends to: causal (j <= i); blocked, of that, the keys in the query's own block,
    in the first block, and in every third block before it (a block-sparse pattern)."""
    i = torch.arange(length, device=device)
    keep = i[None, :] <= i[:, None]
    if blocked:
        bi, bj = i[:, None] // KEY_BLOCK, i[None, :] // KEY_BLOCK
        keep &= (bj == bi) | (bj == 0) | ((bi - bj) % 3 == 0)
    return keep


class CausalAttention(torch.autograd.Function):
    """Legal: attention over (..., T, d) in the inputs' dtype as a fused kernel computes it: products of the
    dtype's numbers summed in float32, the softmax in float32 (its log-sum-exp kept for the backward), the
    probabilities rounded to the dtype before P V, the output rounded; the backward recomputes P from the
    log-sum-exp and takes D = rowsum(dO * O) (flash-attention's), rounding dS to the dtype before its products.
    The first query attends to itself alone, so its gradient is 0 in exact arithmetic, and float32 rounding
    in the op."""
    blocked = False
    factor = 1.0  # on dq

    @staticmethod
    def scores(q, k, blocked):
        s = (q.float() @ k.float().transpose(-1, -2)) * q.shape[-1] ** -0.5
        return s.masked_fill(~attention_mask(q.shape[-2], blocked, q.device), float("-inf"))

    @classmethod
    def forward(cls, ctx, q, k, v):
        s = cls.scores(q, k, cls.blocked)
        lse = torch.logsumexp(s, -1, keepdim=True)
        o = (torch.exp(s - lse).to(q.dtype).float() @ v.float()).to(q.dtype)
        ctx.save_for_backward(q, k, v, o, lse)
        return o

    @classmethod
    def backward(cls, ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        p = torch.exp(cls.scores(q, k, cls.blocked) - lse)
        do = do.float()
        dv = p.to(q.dtype).float().transpose(-1, -2) @ do
        ds = (p * (do @ v.float().transpose(-1, -2) - (do * o.float()).sum(-1, keepdim=True))).to(q.dtype).float()
        scale = q.shape[-1] ** -0.5
        dq, dk = cls.factor * (ds @ k.float()) * scale, (ds.transpose(-1, -2) @ q.float()) * scale
        needs = ctx.needs_input_grad
        return tuple(grad.to(q.dtype) if need else None for grad, need in zip((dq, dk, dv), needs))


class BlockedAttention(CausalAttention):
    """Legal: the same kernel over the block-sparse pattern (its own block, the first, every third before)."""
    blocked = True


class CausalAttentionDqTimes102(CausalAttention):
    """BUG: dq times 1.02 (a 2% error)."""
    factor = 1.02


class BlockedAttentionDqTimes102(BlockedAttention):
    """BUG: dq times 1.02 (a 2% error)."""
    factor = 1.02


class BlockedAttentionDvForOnes(BlockedAttention):
    """BUG: dv is P^T 1, the gradient for grad_output = 1: it ignores grad_output."""
    @classmethod
    def backward(cls, ctx, do):
        dq, dk, _ = BlockedAttention.backward.__func__(cls, ctx, do)
        q, _, _, _, lse = ctx.saved_tensors
        p = torch.exp(cls.scores(q, ctx.saved_tensors[1], cls.blocked) - lse)
        return dq, dk, (p.to(q.dtype).float().transpose(-1, -2) @ torch.ones_like(do).float()).to(q.dtype)


def attention_reference(blocked):
    def reference(q, k, v):
        s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
        s = s.masked_fill(~attention_mask(q.shape[-2], blocked, q.device), float("-inf"))
        return torch.softmax(s, -1) @ v
    return reference


def attention_inputs(op):
    def make(shape, dtype, seed, scale):  # scale is the scores' temperature: q and k scaled by sqrt(scale)
        q, k = (draw(shape, dtype, seed, scale ** 0.5, salt=s) for s in (10, 11))
        return Case(op, (q, k, draw(shape, dtype, seed, 1.0, salt=12)), {}, attention_reference(op.blocked), {})
    return make


ATTENTION_SCALES = (0.25, 1.0, 2.0)  # at 4, dS rounded to bfloat16 before its products leaves dq 30% off, past PyTorch's
BF16_TWO_PERCENT = ("a 2% error in bfloat16 is within what rounding a shared value does (a row's log-sum-exp "
                    "rounded to bfloat16 scales its whole gradient by up to 1.6%): undecidable, so bfloat16 plants "
                    "a bug of another kind")


# ---------------------------------------------------------------------------------------------
# (l) Chunked float32 scans: gated linear attention, its matrix products on TF32 operands
# ---------------------------------------------------------------------------------------------

SCAN_CHUNK = 16


class TF32Product(torch.autograd.Function):
    """a @ b on TF32 operands, its backward's two products too (Triton's default for a float32 tl.dot)."""
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return tf32(a) @ tf32(b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return tf32(g) @ tf32(b).transpose(-1, -2), tf32(a).transpose(-1, -2) @ tf32(g)


def chunked_scan(q, k, v, g):
    """o_t = sum over s <= t of exp(G_t - G_s) (q_t . k_s) v_s, G = cumsum(g), in chunks of SCAN_CHUNK: within
    a chunk as a masked product, across chunks through a running state S (..., d, d), every product on TF32
    operands."""
    state = torch.zeros(*q.shape[:-2], q.shape[-1], v.shape[-1], dtype=q.dtype, device=q.device)
    out = []
    for start in range(0, q.shape[-2], SCAN_CHUNK):
        qc, kc, vc = (t[..., start:start + SCAN_CHUNK, :] for t in (q, k, v))
        decay = g[..., start:start + SCAN_CHUNK].cumsum(-1)
        n = qc.shape[-2]
        causal = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
        within = torch.exp(decay[..., :, None] - decay[..., None, :]).masked_fill(~causal, 0.0)
        scores = TF32Product.apply(qc, kc.transpose(-1, -2)) * within
        out.append(TF32Product.apply(scores, vc) + TF32Product.apply(qc * torch.exp(decay)[..., None], state))
        carried = kc * torch.exp(decay[..., -1:] - decay)[..., None]
        state = state * torch.exp(decay[..., -1])[..., None, None] + TF32Product.apply(carried.transpose(-1, -2), vc)
    return torch.cat(out, -2)


class ChunkedScan(torch.autograd.Function):
    """Legal: gated linear attention in float32 chunks, on TF32 operands; the gate's gradient as fused kernels
    take it, the reverse cumulative sum of q . dq - k . dk: its first element is 0 in exact arithmetic (moving
    every G alike moves no output), and the sum of terms that cancel in the op."""
    factor = 1.0  # on dv

    @staticmethod
    def forward(ctx, q, k, v, g):
        ctx.save_for_backward(q, k, v, g)
        return chunked_scan(q, k, v, g)

    @classmethod
    def backward(cls, ctx, do):
        q, k, v, g = ctx.saved_tensors
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
            dq, dk, dv = torch.autograd.grad(chunked_scan(*leaves, g), leaves, do)
        dg = (q * dq - k * dk).sum(-1).flip(-1).cumsum(-1).flip(-1)
        return dq, dk, cls.factor * dv, dg


class ChunkedScanDvTimes102(ChunkedScan):
    """BUG: dv times 1.02 (a 2% error)."""
    factor = 1.02


def chunked_scan_reference(q, k, v, g):
    decay = g.cumsum(-1)
    length = q.shape[-2]
    causal = torch.ones(length, length, dtype=torch.bool, device=q.device).tril()
    within = torch.exp(decay[..., :, None] - decay[..., None, :]).masked_fill(~causal, 0.0)
    return ((q @ k.transpose(-1, -2)) * within) @ v


def scan_inputs(op):
    def make(shape, dtype, seed, scale):
        q, k, v = (draw(shape, dtype, seed, scale, salt=s) for s in (20, 21, 22))
        g = -F.softplus(draw(shape[:-1], F64, seed, 1.0, salt=23).cpu()) * 0.5
        return Case(op, (q, k, v, g.to(dtype).to(DEVICE)), {}, chunked_scan_reference, {})
    return make


# ---------------------------------------------------------------------------------------------
# (m) The names a hidden probe found wrong
# ---------------------------------------------------------------------------------------------

class LayerNormFormula(torch.autograd.Function):
    """Legal: layer norm with its backward written out, dx = rstd (gw - mean(gw) - xhat mean(gw xhat))."""
    @staticmethod
    def forward(ctx, x, weight, bias):
        mean = x.mean(-1, keepdim=True)
        rstd = torch.rsqrt(x.var(-1, unbiased=False, keepdim=True) + LN_EPS)
        xhat = (x - mean) * rstd
        ctx.save_for_backward(xhat, rstd, weight)
        return xhat * weight + bias

    @classmethod
    def backward(cls, ctx, g):
        xhat, rstd, weight = ctx.saved_tensors
        g = cls.grad_output(g)
        gw = g * weight
        dx = rstd * (gw - gw.mean(-1, keepdim=True) - xhat * (gw * xhat).mean(-1, keepdim=True))
        rows = tuple(range(g.dim() - 1))
        return dx, (g * xhat).sum(rows), g.sum(rows)

    @staticmethod
    def grad_output(g):
        return g


class LayerNormFormulaForOnes(LayerNormFormula):
    """BUG: the backward takes grad_output as ones; with the weight all ones (nn.LayerNorm's start) and only x
    wanting a gradient, that is x's gradient for grad_output = 1, which is 0 but for rounding."""
    @staticmethod
    def grad_output(g):
        return torch.ones_like(g)


def layer_norm_x_only(op):
    def make(shape, dtype, seed, scale):
        case = layer_norm_inputs(op)(shape, dtype, seed, scale)
        return dataclasses.replace(case, reference=layer_norm_reference_like_x, options={"no_grad": ("weight", "bias")})
    return make


def layer_norm_reference_like_x(x, weight, bias):
    return layer_norm_reference(x, weight.to(x.dtype), bias.to(x.dtype))


# BUG: x's gradient returned as float16, whatever x's dtype: for a bfloat16 x, a dtype that cannot hold its range
# (float16 stops at 65504); for a float32 x, its precision.
SquareGradientInFloat16 = one_input(square, lambda x, g: (2 * x * g).to(torch.float16), "SquareGradientInFloat16")


def read_at_strides(t, strides):
    """What a GPU kernel reads at t's address with other strides: t's memory, and past its end whatever memory
    holds there (NaN here), never an error."""
    n = t.numel()
    rest = t.untyped_storage().nbytes() // t.element_size() - t.storage_offset()
    memory = torch.cat([t.as_strided((rest,), (1,), t.storage_offset()),
                        torch.full((max(strides) * n,), float("nan"), dtype=t.dtype, device=t.device)])
    return memory.as_strided(t.shape, strides, 0)


# BUG: a 1-D kernel that reads grad_output at x's strides (one element offset for both), right whenever grad_output
# is laid out like x: after torch.stack(dim=-1) grad_output is every other element, after .sum() a single one; for x
# given as x[::2], a contiguous grad_output is read at every other element.
SquareReadsGradOutputLikeInput = one_input(square, lambda x, g: 2 * x * read_at_strides(g, x.stride()),
                                           "SquareReadsGradOutputLikeInput")


def every_other_element(shape, dtype, seed, scale):
    """x given as x[::2] of a buffer twice its length."""
    wide = draw((2 * shape[0],), dtype, seed, scale)
    return Case(SquareReadsGradOutputLikeInput, (wide[::2],), {}, square, {})


FAR_BRANCH = -20.0


class SoftplusFarBelow(Softplus):
    """BUG: below -20 the backward takes softplus'(x) as 2 exp(x) (it is exp(x) there, to 2e-9): wrong by 100%
    on gradients of 1e-9 and less, beside gradients of 0.5."""
    @staticmethod
    def derivative(x):
        return torch.where(x < FAR_BRANCH, 2 * torch.exp(x), torch.sigmoid(x))


def far_and_near(shape, dtype, seed, scale):
    """A quarter of the elements in [-40, -20) (whatever the scale), the rest scale * N(0, 1), in a seeded order:
    the test's own values reach the branch."""
    n = numel(shape)
    g = generator(seed, 6)
    far = n // 4 + 1
    values = torch.cat([-40.0 + 20.0 * torch.rand(far, generator=g, dtype=F64),
                        torch.randn(n - far, generator=g, dtype=F64) * scale])
    x = values[torch.randperm(n, generator=g)]
    return Case(SoftplusFarBelow, (x.reshape(shape).to(dtype).to(DEVICE),), {}, F.softplus, {})


# ---------------------------------------------------------------------------------------------
# The registry
# ---------------------------------------------------------------------------------------------

def family(name, cls, traps, dtypes, ranks, make, why, **more):
    return Family(name, cls, not traps, frozenset(traps), tuple(dtypes), tuple(ranks), make, why, **more)


ALL_DTYPES = (F64, F32, BF16)
ALL_RANKS = (1, 2, 3)

FAMILY_LIST = [
    # (a) elementwise block kernels
    family("gelu_triton", "a", (), (F64, F32, BF16, F16), ALL_RANKS, one_tensor(hardened_ops.TritonGELU, gelu),
           "legal: hardened_ops' Triton kernels, cdiv(n, BLOCK) blocks and a masked tail, the chain rule applied"),
    family("gelu_triton_no_chain_rule", "a", {IGNORES}, (F64, F32, BF16, F16), ALL_RANKS,
           one_tensor(hardened_ops.TritonGELUBuggy, gelu),
           "the book's buggy kernel: stores GELU'(x), never times grad_output"),
    family("gelu_first_element", "a", {UNIFORM}, ALL_DTYPES, ALL_RANKS, one_tensor(GELUFirstElement, gelu),
           "grad_output.reshape(-1)[0] * GELU'(x): right for every uniform grad_output"),
    family("gelu_times_1_02", "a", {WRONG_FORMULA}, (F64, F32), ALL_RANKS, one_tensor(GELUTimes102, gelu),
           "the right formula times 1.02 (not in bfloat16, where 2% is within the dtype's 1.6% tolerance plus "
           "rounding: undecidable there)"),
    family("gelu_grid_one_block_short", "a", {COVERS_PART}, (F64, F32, BF16), ALL_RANKS,
           one_tensor(GELUGridShort, gelu),
           "Triton backward launched on max(1, cdiv(n, 1024) - 1) blocks: the last block never computed (not at "
           "scale 1e3, where a one-element tail at x < -40 has a true gradient of 0: nothing to miss)",
           size_rule=grid_short_rule, scales=(1e-3, 1.0)),
    family("gelu_mask_n_minus_1", "a", {COVERS_PART}, (F64, F32, BF16), ALL_RANKS, one_tensor(GELUMaskShort, gelu),
           "Triton backward masked with offsets < n - 1: the last element is never computed, at every size (not "
           "at scale 1e3, where that element's true gradient is 0 half the time)", scales=(1e-3, 1.0)),
    # (b) normalisers
    family("softmax_rows", "b", (), ALL_DTYPES, ALL_RANKS, one_tensor(SoftmaxRows, lambda x: torch.softmax(x, -1)),
           "legal: aten._softmax_backward_data", scales=(1e-3, 1.0, 10.0)),
    family("softmax_rows_for_ones", "b", {IGNORES}, ALL_DTYPES, ALL_RANKS,
           one_tensor(SoftmaxRowsForOnes, lambda x: torch.softmax(x, -1)),
           "the gradient for grad_output = ones (~0): ignores grad_output", scales=(1e-3, 1.0, 10.0)),
    family("layer_norm", "b", (), ALL_DTYPES, ALL_RANKS, layer_norm_inputs(LayerNorm),
           "legal: aten.native_layer_norm_backward for x, weight (ones) and bias (zeros)"),
    family("layer_norm_for_ones", "b", {IGNORES}, ALL_DTYPES, ALL_RANKS, layer_norm_inputs(LayerNormForOnes),
           "every gradient the one for grad_output = ones: ignores grad_output"),
    # (c) exactly-zero true gradients
    family("bias_batch_norm_torch", "c", (), (F64, F32), (2, 3), bias_batch_norm_inputs(BiasBatchNorm),
           "legal: aten.native_batch_norm_backward; b's gradient, exactly 0, computed as a sum (rounding)"),
    family("bias_batch_norm_zeros", "c", (), (F64, F32), (2, 3), bias_batch_norm_inputs(BiasBatchNormZeros),
           "legal: b's gradient returned as exact zeros"),
    family("bias_batch_norm_none", "c", (), (F64, F32), (2, 3), bias_batch_norm_inputs(BiasBatchNormNone),
           "legal: b's gradient returned as None"),
    family("bias_batch_norm_atomic", "c", (), (F64, F32), (2, 3), bias_batch_norm_inputs(BiasBatchNormAtomic),
           "legal: every batch sum in an order that varies per call (atomic adds); b's gradient is rounding "
           "that differs from call to call"),
    # (d) outputs of very different scales
    family("decay_1e-4", "d", (), ALL_DTYPES, ALL_RANKS, decay_inputs(ScaleWithDecay, 1e-4),
           "legal: (x * w, 1e-4 * |w|^2), both outputs' gradients"),
    family("decay_1e-2", "d", (), ALL_DTYPES, ALL_RANKS, decay_inputs(ScaleWithDecay, 1e-2),
           "legal: (x * w, 1e-2 * |w|^2), both outputs' gradients"),
    family("decay_1e-4_dropped", "d", {IGNORES}, ALL_DTYPES, ALL_RANKS, decay_inputs(ScaleDropsDecay, 1e-4),
           "the small output's gradient dropped: with only its grad_output nonzero, w's gradient is 0"),
    family("decay_1e-2_dropped", "d", {IGNORES}, ALL_DTYPES, ALL_RANKS, decay_inputs(ScaleDropsDecay, 1e-2),
           "the small output's gradient dropped: with only its grad_output nonzero, w's gradient is 0"),
    # (e) masks of -inf
    family("masked_softmax_float_mask", "e", (), ALL_DTYPES, ALL_RANKS, masked_inputs("float", True),
           "legal: a 0/-inf float mask in no_grad, against a reference", scales=(1e-3, 1.0, 10.0)),
    family("masked_softmax_bool_mask", "e", (), ALL_DTYPES, ALL_RANKS, masked_inputs("bool", True),
           "legal: a bool keep-mask, against a reference", scales=(1e-3, 1.0, 10.0)),
    family("masked_softmax_no_reference", "e", (), (F64, F32), ALL_RANKS, masked_inputs("float", False),
           "legal: a 0/-inf float mask in no_grad, against finite differences (given inputs of at most 1000 "
           "elements: 4 calls an element, 4000 at most; not bfloat16, too coarse to difference)",
           scales=(1e-3, 1.0, 10.0), max_numel=1000),
    # (f) saturating functions
    family("tanh_saturated", "f", (), (F64, F32), ALL_RANKS, one_tensor(Tanh, torch.tanh),
           "legal: aten.tanh_backward at inputs scaled into saturation", scales=(1.0, 10.0, 1e3),
           undecided_ok=SATURATED),
    family("logsumexp_near_-3000", "f", (), (F64, F32), ALL_RANKS, log_likelihoods,
           "legal: logsumexp of log-likelihoods -3000 + scale * N(0, 1)", scales=(1e-3, 1.0, 10.0),
           undecided_ok=NEAR_3000),
    family("logsumexp_bf16", "f", (), (BF16,), ALL_RANKS, one_tensor(LogSumExp, logsumexp_reference),
           "legal: logsumexp in bfloat16", scales=(1e-3, 1.0, 10.0), undecided_ok=BF16_LSE),
    # (g) row-padded views
    family("row_padded_contiguous", "g", (), ALL_DTYPES, (2, 3), row_padded(SquareRowsContiguous),
           "legal: x.contiguous() before a kernel that assumes packed rows"),
    family("row_padded_maybe_contiguous", "g", {CONTIGUOUS_INPUT}, ALL_DTYPES, (2, 3),
           row_padded(SquareRowsRepairsTranspose),
           "flash-attn's maybe_contiguous (repairs stride(-1) != 1 only) before a kernel that assumes row stride "
           "== shape[-1]: a row-padded view is misread", pending=ROW_PADDED_PENDING),
    # (h) TF32
    family("matmul_tf32_backward", "h", (), (F32,), (2, 3), matmul_inputs(MatmulTF32Backward),
           "legal: the backward's matmuls on TF32 operands", undecided_ok=TF32_NOTE,
           probe_rtol={F32: 4e-3}),
    family("matmul_tf32_both", "h", (), (F32,), (2, 3), matmul_inputs(MatmulTF32Both),
           "legal: forward and backward in TF32 (the forward's own error calibrates the tolerance)",
           undecided_ok=TF32_NOTE, probe_rtol={F32: 4e-3}),
    family("matmul_tf32_times_1_02", "h", {WRONG_FORMULA}, (F32,), (2, 3), matmul_inputs(MatmulTF32Times102),
           "the TF32 backward times 1.02"),
    # (i) selection
    family("topk_rows", "i", (), ALL_DTYPES, ALL_RANKS, topk_inputs,
           "legal: top-4 of each row, distinct values (no ties), the gradient scattered back",
           scales=(2.0 ** -10, 1.0, 2.0 ** 10)),
    # (j) value range
    family("softplus", "j", (), ALL_DTYPES, ALL_RANKS, softplus_inputs(Softplus),
           "legal: gradient sigmoid(x) everywhere"),
    family("softplus_zero_below_-4", "j", {WRONG_FORMULA}, (F64, F32), ALL_RANKS, softplus_inputs(SoftplusZeroBelow),
           "a branch that returns 0 for x < -4, where the true gradient is 0.0025 to 0.018 (not bfloat16: "
           "that is within its tolerance)"),
    family("softplus_flipped_below_-4", "j", {WRONG_FORMULA}, ALL_DTYPES, ALL_RANKS,
           softplus_inputs(SoftplusFlippedBelow), "a branch that returns sigmoid(-x) for x < -4 (~1 for ~0.01)"),
]

FAMILY_LIST += [
    # (k) attention in float16 and bfloat16
    family("attention_causal", "k", (), (F16, BF16), (2, 3), attention_inputs(CausalAttention),
           "legal: float32 sums of the dtype's products, P and dS rounded to the dtype, the output rounded; the first "
           "query's gradient 0 in exact arithmetic", scales=ATTENTION_SCALES),
    family("attention_blocked", "k", (), (F16, BF16), (2, 3), attention_inputs(BlockedAttention),
           "legal: the same kernel over a block-sparse pattern", scales=ATTENTION_SCALES),
    family("attention_causal_dq_times_1_02", "k", {WRONG_FORMULA}, (F16,), (2, 3),
           attention_inputs(CausalAttentionDqTimes102), f"dq times 1.02 (not bfloat16: {BF16_TWO_PERCENT})",
           scales=ATTENTION_SCALES),
    family("attention_blocked_dq_times_1_02", "k", {WRONG_FORMULA}, (F16,), (2, 3),
           attention_inputs(BlockedAttentionDqTimes102), f"dq times 1.02 (not bfloat16: {BF16_TWO_PERCENT})",
           scales=ATTENTION_SCALES),
    family("attention_blocked_dv_for_ones", "k", {IGNORES}, (F16, BF16), (2, 3),
           attention_inputs(BlockedAttentionDvForOnes), "dv is P^T 1, the gradient for grad_output = 1",
           scales=ATTENTION_SCALES),
    # (l) chunked float32 scans
    family("chunked_scan_tf32", "l", (), (F32,), (2, 3), scan_inputs(ChunkedScan),
           "legal: gated linear attention in chunks of 16 on TF32 operands; the gate's gradient a reverse cumulative "
           "sum whose first element is 0 in exact arithmetic", scales=(0.5, 1.0, 2.0), probe_rtol={F32: 4e-3}),
    family("chunked_scan_dv_times_1_02", "l", {WRONG_FORMULA}, (F32,), (2, 3), scan_inputs(ChunkedScanDvTimes102),
           "dv times 1.02 (a 2% error)", scales=(0.5, 1.0, 2.0)),
    # (m) the names a hidden probe found wrong
    family("layer_norm_weight_ones_for_ones", "m", {IGNORES}, (F64, F32, BF16, F16), (2, 3),
           layer_norm_x_only(LayerNormFormulaForOnes),
           "only x wants a gradient, the weight all ones: x's gradient for grad_output = 1 is 0 but for rounding, "
           "and the op's rounding is not the reference's (not at 1e3, whose squares float16 cannot hold)",
           scales=(1e-3, 1.0, 10.0)),
    family("layer_norm_formula", "m", (), (F64, F32, BF16, F16), (2, 3), layer_norm_x_only(LayerNormFormula),
           "legal: the same backward, grad_output used", scales=(1e-3, 1.0, 10.0)),
    family("square_gradient_in_float16", "m", {RETURNS_WRONG}, (F32, BF16), ALL_RANKS,
           one_tensor(SquareGradientInFloat16, square), "x's gradient returned as float16"),
    family("square_reads_grad_output_like_input", "m", {LAID_OUT_LIKE_INPUT}, (F64, F32), (1,),
           one_tensor(SquareReadsGradOutputLikeInput, square),
           "a 1-D kernel that reads grad_output at x's strides: wrong for torch.stack's every other element, and "
           "for x laid out x[::2]"),
    family("square_reads_grad_output_like_input_given_strided", "m", {LAID_OUT_LIKE_INPUT}, (F64, F32), (1,),
           every_other_element, "the same kernel, x given as x[::2]: wrong for the contiguous grad_output a test "
           "hands it, right for one laid out like x"),
    family("softplus_2exp_below_-20", "m", {WRONG_FORMULA}, (F64, F32), ALL_RANKS, far_and_near,
           "2 exp(x) for x < -20, where softplus' is exp(x) to 2e-9: the test's values reach it (a quarter in "
           "[-40, -20)); not bfloat16, whose exponent step at 20 moves exp(x) by 6%"),
]

FAMILIES = {f.name: f for f in FAMILY_LIST}
assert len(FAMILIES) == len(FAMILY_LIST), "two families of one name"


# Shapes by size class and rank: under a block, exactly one block, one block and one, several blocks with a
# tail. Last dimensions that are not multiples of 16 (5, 17, 33, 41, 79, 205, 1027) sit beside ones that are.
SHAPES = {
    "under a block": {1: [(15,), (300,)], 2: [(3, 5), (12, 33)], 3: [(2, 3, 5), (4, 6, 17)]},
    "one block": {1: [(1024,)], 2: [(32, 32), (8, 128)], 3: [(4, 16, 16), (2, 4, 128)]},
    "one block and one": {1: [(1025,)], 2: [(25, 41), (5, 205)], 3: [(5, 5, 41)]},
    "three blocks and a tail": {1: [(3 * BLOCK + 7,)], 2: [(39, 79), (3, 1027)], 3: [(3, 13, 79)]},
    "four blocks and a tail": {1: [(4100,)], 2: [(41, 100), (100, 41)], 3: [(4, 25, 41)]},
}


def shapes_for(fam):
    """Every tabled shape the family takes (its ranks, at most max_numel elements)."""
    return [s for sizes in SHAPES.values() for rank in fam.ranks for s in sizes.get(rank, [])
            if numel(s) <= fam.max_numel]
