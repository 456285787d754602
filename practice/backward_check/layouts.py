"""The inputs and grad_outputs the checker draws, each a named strategy, reproducible from its seed.

grad_outputs: random (what a weight, a mask or a loss per row hands back), uniform (what 2 * z + 1
and fan-in hand back), and the layouts autograd really hands a backward: after .sum() every stride
is 0; after .sum(dim=0) a row repeated with stride 0; after torch.cat along the last dimension a
narrow view of a wider gradient; after a transpose, a transposed one. tests/test_checker_strategies.py
checks that autograd hands exactly these strides.

Inputs: the ones given, and the same grown to span several 1024-element blocks with a ragged tail,
every dimension of size > 1 mapped to a larger odd size, consistently across arguments.
"""
import math

import torch

BLOCK = 1024          # the chapter's kernels' block: a grown input spans several, with a ragged tail
GROWN_NUMEL = 3 * BLOCK + 1


def generator(seed):
    return torch.Generator().manual_seed(seed)


def randn(shape, like, seed):
    return torch.randn(tuple(shape), generator=generator(seed), dtype=torch.float64).to(like.device, like.dtype)


def random_like(t, seed):
    return randn(t.shape, t, seed)


def uniform_like(t, value):
    return torch.full(t.shape, value, dtype=t.dtype, device=t.device)


# -- the layouts autograd hands on ---------------------------------------------------------

def after_sum(t, seed):
    """loss = c * z.sum(): SumBackward0 expands a 0-dim gradient, so every stride is 0 (and every value c)."""
    value = torch.randn((), generator=generator(seed), dtype=torch.float64).item()
    return torch.tensor(value, dtype=t.dtype, device=t.device).expand(t.shape)


def after_sum_dim0(t, seed):
    """(w * z.sum(dim=0)).sum(): one random row repeated, stride 0 along dimension 0."""
    return randn(t.shape[1:], t, seed).unsqueeze(0).expand(t.shape)


def after_cat(t, seed):
    """(w * torch.cat([z, other], dim=-1)).sum(): CatBackward0 hands z a narrow view of w."""
    wider = randn((*t.shape[:-1], t.shape[-1] + 3), t, seed)
    return wider.narrow(-1, 0, t.shape[-1])


def after_transpose(t, seed):
    """(w * z.transpose(0, -1)).sum(): the gradient comes back transposed."""
    return randn(tuple(reversed(t.shape)), t, seed).permute(*reversed(range(t.dim())))


# In the order they are tried: the transpose first (it tells "laid out like its input" apart), the
# stride-0 ones last, since a kernel that assumes contiguity reads past their small storage.
LAYOUTS = {
    "after a transpose": after_transpose,
    "after torch.cat(dim=-1) (a narrow view)": after_cat,
    "after .sum(dim=0) (stride 0 along dim 0)": after_sum_dim0,
    "after .sum() (all strides 0)": after_sum,
}


def layouts_for(t, seed):
    """(label, grad_output) for each layout that differs from contiguous for t's shape."""
    if t.dim() == 0 or t.numel() < 2:
        return []
    chosen = []
    for k, (label, make) in enumerate(LAYOUTS.items()):
        if make is not after_sum and t.dim() < 2:
            continue
        g = make(t, seed + k)
        if not g.is_contiguous():
            chosen.append((label, g))
    return chosen


def transposed_copy(t):
    """The same values, laid out transposed in memory (non-contiguous), where t has 2 or more dims."""
    return t.detach().permute(*reversed(range(t.dim()))).contiguous().permute(*reversed(range(t.dim())))


# -- growing the inputs ------------------------------------------------------------------

def _grown_sizes(sizes, numel, count):
    """A larger odd size for each size, all scaled by one factor, so that the largest tensor (numel
    elements over count growable dimensions) reaches GROWN_NUMEL and no dimension is a multiple
    of a power of two."""
    factor = (GROWN_NUMEL / numel) ** (1.0 / count)
    grown = {}
    for s in sizes:
        new = max(s + 2, math.ceil(s * factor))
        grown[s] = new + (new % 2 == 0)
    return grown


def kept(size):
    """Sizes that are multiples of 16 are kept: kernels often need them so (head and hidden sizes)."""
    return size >= 16 and size % 16 == 0


def grow(values, slots):
    """values grown to span several blocks, or (None, why not). Sizes shared across arguments stay
    shared (logits (B, V) and targets (B,) grow together); an integer argument equal to a size
    (a length passed alongside) stops it, since its meaning is unknown."""
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    largest = max((t for t in tensors if t.is_floating_point()), key=lambda t: t.numel())
    if largest.numel() >= GROWN_NUMEL:
        return None, f"the inputs already span {largest.numel()} elements"
    sizes = sorted({s for t in tensors for s in t.shape if s > 1 and not kept(s)})
    counted = [s for s in largest.shape if s > 1 and not kept(s)]
    if not counted:
        return None, "the largest input has no dimension to grow (sizes of 1, or multiples of 16)"
    for s, v in zip(slots, values):
        numbers = v if isinstance(v, (tuple, list)) else (v,)
        if any(isinstance(n, int) and not isinstance(n, bool) and n in sizes for n in numbers):
            return None, f"`{s.name}` = {v} matches a dimension's size, so it may have to grow with it"
    grown = _grown_sizes(sizes, largest.numel(), len(counted))
    return [_grow_one(v, grown, seed=100 + i) if isinstance(v, torch.Tensor) else v
            for i, v in enumerate(values)], ""


def _grow_one(t, grown, seed):
    """t tiled to its grown shape; floating-point values then each scaled by a factor in (0.75, 1.25),
    so that no two rows are equal (a kernel reading the wrong row must show) and no sign changes."""
    index = [torch.arange(grown.get(s, s), device=t.device) % s for s in t.shape]
    out = t.detach()
    for dim, ix in enumerate(index):
        out = out.index_select(dim, ix)
    if out.is_floating_point():
        jitter = torch.rand(out.shape, generator=generator(seed), dtype=torch.float64) * 0.5 + 0.75
        out = (out.double() * jitter.to(out.device)).to(t.dtype)
    return out.contiguous()


def jittered(t, seed):
    """Other values of t's shape and sign: each scaled by a factor in (0.75, 1.25)."""
    return _grow_one(t, {}, seed)


def describe_shapes(values):
    return ", ".join(str(tuple(v.shape)) for v in values if isinstance(v, torch.Tensor))
