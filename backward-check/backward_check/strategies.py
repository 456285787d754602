"""What the checker varies, each a named strategy, reproducible from its stream's name.

grad_outputs: random (what a weight, a mask or a loss per row hands back), uniform (what 2 * z + 1
and fan-in hand back), and the layouts autograd really hands a backward: after .sum() every stride
is 0; after .sum(dim=0) a row repeated with stride 0 along dim 0; after .sum(dim=-1) a column
repeated (strides (1, 0)); after torch.cat along the last dimension a narrow view of a wider
gradient; after torch.stack along the last dimension of 1-D tensors, every other element; after a
transpose, a transposed one. tests/test_checker_strategies.py checks that autograd hands exactly these
strides.

Inputs: the ones given, and the same grown to span several 1024-element blocks with a ragged tail.
The checker varies only what is its own to vary: the floating-point inputs it takes gradients for.
It never changes an integer tensor or an argument named in no_grad, so a dimension such an argument
has (or an integer that equals a size) is never grown. A grown input holds the given values, tiled,
each scaled by a factor in (0.75, 1.25): the user's regime, with no two rows equal, and no two
values equal that the factors made equal (no new ties for a selection op to break either way).

Every random draw comes from a stream named for its use (draw(name, ...)), from its own generator, never
torch's global one: made on the CPU and moved to the device of the tensor it is like, or, past CPU_DRAW
elements, made on that device.
"""
import math
import zlib

import torch

from .contracts import NOTHING, Unkept, finite_elements, found

BLOCK = 1024          # the chapter's kernels' block: a grown input spans several, with a ragged tail
GROWN_NUMEL = 3 * BLOCK + 1


# Up to this many elements a draw is made on the CPU, the same values on every machine (a small input, as the
# zoos' and most tests' are, is checked alike on a GPU and on the CPU); past it, on the tensor's own device from a
# generator seeded alike. A float64 draw costs the CPU about 20 ns an element: on an H100, drawing on the CPU up to
# 4M elements made four fifths of a check at 10^6 elements (softplus and softmax 3,600 to 7,100 times the op, against
# 600 to 1,000 at 10^7, drawn on the GPU; benchmarks/results/check_cost_gpu_draws.log).
CPU_DRAW = 1 << 12


def generator(name, base=0, device="cpu"):
    """The generator of the stream called name (base: one per set of inputs), on device."""
    return torch.Generator(device=device).manual_seed(base * 1_000_003 + zlib.crc32(name.encode()))


def draw_on(numel, device):
    """Where a draw of numel elements for a tensor on device is made: the CPU up to CPU_DRAW elements, or
    where device has no generator of its own; device past it."""
    device = torch.device(device)
    if numel <= CPU_DRAW or device.type == "cpu":
        return torch.device("cpu")
    try:
        torch.Generator(device=device)
    except RuntimeError:
        return torch.device("cpu")
    return device


# The dtype a draw is made in for a tensor of each dtype: float32 for the narrow ones, since their values are
# float32's or narrower, and a float32 draw costs the CPU a quarter of a float64 one (a random grad_output was a
# fifth of a check of 10^5 elements); float64 for the rest.
DRAWN_IN = {torch.float32: torch.float32, torch.float16: torch.float32, torch.bfloat16: torch.float32}


def randn(shape, like, name, base=0):
    """Standard normal values of shape, drawn from stream name, with like's dtype and device."""
    where = draw_on(math.prod(shape), like.device)
    drawn = torch.randn(tuple(shape), generator=generator(name, base, where),
                        dtype=DRAWN_IN.get(like.dtype, torch.float64), device=where)
    return drawn.to(device=like.device, dtype=like.dtype)


def randn_flat(n, device, name, base=0):
    """n standard normal float64 values from stream name, on device."""
    where = draw_on(n, device)
    return torch.randn(n, generator=generator(name, base, where), dtype=torch.float64, device=where).to(device)


def uniform_like(t, value):
    return torch.full(t.shape, value, dtype=t.dtype, device=t.device)


# -- the layouts autograd hands on ---------------------------------------------------------

def after_sum(t, name, base=0):
    """loss = c * z.sum(): SumBackward0 expands a 0-dim gradient, so every stride is 0 (and every value c)."""
    value = torch.randn((), generator=generator(name, base), dtype=torch.float64, device="cpu").item()
    return torch.tensor(value, dtype=t.dtype, device=t.device).expand(t.shape)


def after_sum_dim0(t, name, base=0):
    """(w * z.sum(dim=0)).sum(): one random row repeated, stride 0 along dimension 0."""
    return randn(t.shape[1:], t, name, base).unsqueeze(0).expand(t.shape)


def after_sum_last(t, name, base=0):
    """(w * z.sum(dim=-1)).sum(): one random column repeated, stride 0 along the last dimension."""
    return randn(t.shape[:-1], t, name, base).unsqueeze(-1).expand(t.shape)


def after_cat(t, name, base=0):
    """(w * torch.cat([z, other], dim=-1)).sum(): CatBackward0 hands z a narrow view of w. The columns
    beyond the view hold NaN (as torch's noncontiguous_like fills its gaps), so a kernel that reads it with
    the wrong row stride reads NaN, not plausible numbers."""
    wider = randn((*t.shape[:-1], t.shape[-1] + 3), t, name, base)
    if wider.is_floating_point():
        wider[..., t.shape[-1]:] = float("nan")
    return wider.narrow(-1, 0, t.shape[-1])


def after_stack(t, name, base=0):
    """(w * torch.stack([z, other], dim=-1)).sum() for a 1-D z: StackBackward0 hands z every other element of
    w, stride 2. The elements between hold NaN, as after_cat's gaps do."""
    wider = randn((*t.shape, 2), t, name, base)
    if wider.is_floating_point():
        wider[..., 1] = float("nan")
    return wider[..., 0]


def after_transpose(t, name, base=0):
    """(w * z.transpose(0, -1)).sum(): the gradient comes back transposed."""
    return randn(tuple(reversed(t.shape)), t, name, base).permute(*reversed(range(t.dim())))


# In the order they are tried: the transpose first (it tells "laid out like its input" apart), the
# stride-0 ones last, since a kernel that assumes contiguity reads past their small storage. A 1-D
# grad_output is handed only .sum()'s, and torch.stack's every other element (which tells "laid out like
# its input" apart there).
LAYOUTS = {
    "after a transpose": after_transpose,
    "after torch.cat(dim=-1) (a narrow view)": after_cat,
    "after torch.stack(dim=-1) (every other element)": after_stack,
    "after .sum(dim=0) (stride 0 along dim 0)": after_sum_dim0,
    "after .sum(dim=-1) (stride 0 along the last dim)": after_sum_last,
    "after .sum() (all strides 0)": after_sum,
}
ONE_DIMENSIONAL = (after_sum, after_stack)  # the layouts a 1-D grad_output is handed; after_stack only those


def layouts_for(t, base=0):
    """(label, grad_output) for each layout that differs from contiguous for t's shape."""
    if t.dim() == 0 or t.numel() < 2:
        return []
    chosen = []
    for label, make in LAYOUTS.items():
        if (make not in ONE_DIMENSIONAL and t.dim() < 2) or (make is after_stack and t.dim() != 1):
            continue
        g = make(t, f"layout {label}", base)
        if not g.is_contiguous():
            chosen.append((label, g))
    return chosen


def transposed_copy(t):
    """The same values, laid out transposed in memory (non-contiguous), where t has 2 or more dims."""
    reverse = list(reversed(range(t.dim())))
    return t.detach().permute(*reverse).contiguous().permute(*reverse)


def padded_copy(t, fill=float("nan")):
    """The same values as a view into a wider buffer whose gaps hold fill (NaN): each row padded (`qkv[:, :d]`,
    strides (d + 3, 1)) where t has 2 or more dims, every other element (`x[::2]`) where it has 1. A kernel
    that takes the row stride, or the element stride, for granted reads NaN."""
    t = t.detach()
    if t.dim() >= 2:
        wider = torch.full((*t.shape[:-1], t.shape[-1] + 3), fill, dtype=t.dtype, device=t.device)
        view = wider.narrow(-1, 0, t.shape[-1])
    else:
        wider = torch.full((2 * t.shape[0],), fill, dtype=t.dtype, device=t.device)
        view = wider[::2]
    return view.copy_(t)


# How an input is laid out otherwise, with the same values, where the op may be handed it.
TRANSPOSED, PADDED = "transposed", "padded"
INPUT_LAYOUTS = {TRANSPOSED: transposed_copy, PADDED: padded_copy}


def layout_words(label, laid, name):
    """How input `name` is laid out (label, as laid), in the report's words: the view a caller would write, and
    its strides."""
    strides = tuple(laid.stride())
    if label == TRANSPOSED:
        return f"laid out transposed (strides {strides})"
    if laid.dim() >= 2:
        d = laid.shape[-1]
        return f"given as `{name}[..., :{d}]` of a buffer {d + 3} wide (strides {strides}, the gaps NaN)"
    return f"given as `{name}[::2]` of a buffer twice its length (strides {strides}, the gaps NaN)"


def input_layouts_for(t):
    """(label, the same values laid out so) for each input layout that differs from contiguous for t."""
    if t.numel() < 2 or not t.is_floating_point():
        return []
    chosen = []
    for label, make in INPUT_LAYOUTS.items():
        if make is transposed_copy and t.dim() < 2:
            continue
        laid = make(t)
        if not laid.is_contiguous():
            chosen.append((label, laid))
    return chosen


def jittered(t, name, base=0, contract=None):
    """Other values of t's shape and sign, in its regime: each scaled by a factor in (0.75, 1.25), and kept
    within the given values' range (a probability stays a probability). A value the factor would carry out
    of the range is scaled by the mirrored factor (2 - f) instead, and one still outside is drawn at random
    inside it: never clamped, since a clamp would make values equal that were not (a tie at a row's
    maximum, which a selection op may break either way). Then every property of the contract (t's own, by
    default: see contracts.py) is kept: symmetric stays symmetric, sorted stays sorted, integers stay
    integers; Unkept where one cannot be."""
    where = draw_on(t.numel(), t.device)
    draws = generator(name, base, where)
    factor = (torch.rand(t.shape, generator=draws, dtype=torch.float64, device=where) * 0.5 + 0.75).to(t.device)
    inside = torch.rand(t.shape, generator=draws, dtype=torch.float64, device=where).to(t.device)
    values = t.detach().double()
    finite = finite_elements(values)
    scaled = values * factor
    if finite.numel():
        low, high = finite.min().item(), finite.max().item()

        def out(v):
            return (v < low) | (v > high)

        scaled = torch.where(out(scaled), values * (2.0 - factor), scaled)
        scaled = torch.where(out(scaled), low + (high - low) * inside, scaled)
        scaled = torch.where(values.isfinite(), scaled, values)
    contract = found(t) if contract is None else contract
    if contract != NOTHING:
        scaled = contract.keep(scaled, t.dtype)
    return scaled.to(t.dtype).contiguous()


# -- growing the inputs ------------------------------------------------------------------

def kept(size):
    """Sizes that are multiples of 16 are kept: kernels often need them so (head and hidden sizes)."""
    return size >= 16 and size % 16 == 0


def protected_sizes(values, slots, grown_inputs):
    """The sizes the checker may not change, with why: a dimension of an argument it may not vary
    (an integer tensor, a no_grad table), an integer argument equal to it (a length passed beside),
    or the largest value of an integer tensor (offsets such as cu_seqlens end at a length)."""
    protected = {}
    for i, (slot, v) in enumerate(zip(slots, values)):
        if isinstance(v, torch.Tensor) and i not in grown_inputs:
            for s in v.shape:
                protected.setdefault(s, f"`{slot.name}` has it, and the checker never changes `{slot.name}`")
            if not v.is_floating_point() and not v.is_complex() and v.numel() and v.dtype != torch.bool:
                protected.setdefault(int(v.max()), f"`{slot.name}` holds it as a value (an offset or a length)")
        # a list of tensors (tables passed as a constant) pins its tensors' sizes too
        for t in (v if isinstance(v, (tuple, list)) else ()):
            for s in (t.shape if isinstance(t, torch.Tensor) else ()):
                protected.setdefault(s, f"a tensor in `{slot.name}` has it, and the checker never changes it")
        numbers = v if isinstance(v, (tuple, list)) else (v,)
        for n in numbers:
            if isinstance(n, int) and not isinstance(n, bool):
                protected.setdefault(n, f"`{slot.name}` = {v} matches it, so it may have to grow with it")
        # A list of sizes (an output's shape, a kernel's) has one entry a dimension: its length may be the size of
        # an input's dimension that counts them (a grid's last, of coordinates), which no other length may take.
        if isinstance(v, (tuple, list)) and len(v) > 1 and all(isinstance(n, int) and not isinstance(n, bool)
                                                               for n in v):
            protected.setdefault(len(v), f"`{slot.name}` = {list(v)} has as many entries, one a dimension")
    return protected


def growth_plans(values, slots, grown_inputs):
    """(plans, why not): each plan maps (argument, dimension) to a new size, the first the boldest.
    Only the floating-point inputs in grown_inputs grow, and only along sizes no other argument
    pins (protected_sizes). The first plan also grows two equal dimensions of one input to two
    different sizes (so a square input stops being square, and a shape[0] for shape[1] shows); the
    second keeps equal sizes equal, everywhere (a matrix product's inner dimensions). A symmetric input
    stays square in both."""
    # a complex input held as its parts (complex_parts) grows along its own dimensions, never the parts' last
    tensors = {i: values[i][..., 0] if slots[i].parts else values[i] for i in grown_inputs}
    if not tensors:  # every input is one a function argument reads (its shape is the function's), or none grows
        return [], "no input may change its shape"
    largest = max(tensors.values(), key=lambda t: t.numel())
    if largest.numel() >= GROWN_NUMEL:
        return [], f"the inputs already span {largest.numel()} elements"
    protected = protected_sizes(values, slots, grown_inputs)
    growable = sorted({s for t in tensors.values() for s in t.shape if s > 1 and not kept(s) and s not in protected})
    pinned = sorted({s for t in tensors.values() for s in t.shape if s > 1 and not kept(s) and s in protected})
    if not growable:
        why = "no dimension of the inputs can grow"
        if pinned:
            why += f" ({pinned[0]}: {protected[pinned[0]]})"
        else:
            why += " (sizes of 1, or multiples of 16)"
        return [], why
    # One factor for every size, so that the largest input that can grow reaches GROWN_NUMEL.
    target = max((t for t in tensors.values() if any(s in growable for s in t.shape)), key=lambda t: t.numel())
    count = sum(1 for s in target.shape if s in growable)
    factor = (GROWN_NUMEL / target.numel()) ** (1.0 / count)
    new = {}
    for s in growable:
        size = max(s + 2, math.ceil(s * factor))
        new[s] = size + (size % 2 == 0)
    symmetric = {(i, d): new[s] for i, t in tensors.items() for d, s in enumerate(t.shape) if s in new}
    asymmetric = dict(symmetric)
    repeated = False
    for i, t in tensors.items():
        square = found(t).symmetric
        for d, s in enumerate(t.shape):
            if square and d >= t.dim() - 2:
                continue
            if s in new and list(t.shape[:d]).count(s):  # the second (third...) dimension of this size
                asymmetric[(i, d)] = new[s] + 2 * list(t.shape[:d]).count(s)
                repeated = True
    plans = [asymmetric, symmetric] if repeated else [symmetric]
    return plans, ""


def grow(values, plan):
    """values with each input of the plan grown: tiled along its grown dimensions, then jittered, keeping every
    property of the given values (a tiled symmetric matrix is symmetric, but singular: see contracts.py);
    Unkept where one cannot be."""
    grown = list(values)
    for i in sorted({i for i, _ in plan}):
        t = values[i]
        out = t.detach()
        for d in range(t.dim()):
            size = plan.get((i, d))
            if size is not None:
                index = torch.arange(size, device=t.device) % t.shape[d]
                out = out.index_select(d, index)
        grown[i] = kept_jittered(out, i, f"grown input {i}", contract=found(t))
    return grown


# -- slicing a large input ----------------------------------------------------------------

# An input of SLICE_FROM elements or more is checked whole where its size can matter (the forward, a random
# grad_output, the writes, the same call twice), and on a slice of about SLICED_NUMEL elements for the rest (the
# layouts, state, fan-in, what backward returns...): the same signature (dtypes, ranks, layouts, the rows whole),
# fewer leading rows, at a fraction of the cost.
SLICE_FROM = 1 << 19
SLICED_NUMEL = 1 << 14


def slice_plan(values, slots, varied):
    """(plan, why not): plan maps each argument to narrow to [(dimension, new size), ...], its leading dimensions
    shortened (never the largest input's last: its rows stay whole, and every narrowed size keeps at least two), so
    that the largest input holds about SLICED_NUMEL elements. Every tensor with the same size at the same leading
    dimension is narrowed alike (a loss's targets with its rows). None where the largest input is smaller than
    SLICE_FROM, or a size may be read elsewhere: an integer argument or a list of sizes holding it, an integer
    tensor not narrowed whose values reach the new size (it may index the rows), a list of tensors."""
    tensors = {i: values[i] for i in varied if isinstance(values[i], torch.Tensor)}
    if not tensors:
        return None, "no input may change its shape"
    largest = max(tensors.values(), key=lambda t: t.numel())
    if largest.numel() < SLICE_FROM:
        return None, f"the inputs hold fewer than {SLICE_FROM} elements"
    if any(holds_tensor(v) for v in values):
        return None, "an argument is a list of tensors"
    plan, numel = {}, largest.numel()
    for d in range(largest.dim() - 1):
        size = largest.shape[d]
        rest = numel // size
        new = max(2, math.ceil(SLICED_NUMEL / rest))
        if new >= size:
            continue
        narrowed = [i for i, v in enumerate(values)
                    if isinstance(v, torch.Tensor) and v.dim() > d and v.shape[d] == size]
        for i, v in enumerate(values):
            if i in narrowed:
                continue
            numbers = v if isinstance(v, (tuple, list)) else (v,)
            if any(isinstance(n, int) and not isinstance(n, bool) and n == size for n in numbers):
                return None, f"`{slots[i].name}` holds {size}, a size of the inputs"
            if (isinstance(v, torch.Tensor) and not v.is_floating_point() and not v.is_complex() and v.numel()
                    and v.dtype != torch.bool and int(v.max()) >= new):
                return None, (f"`{slots[i].name}` holds values up to {int(v.max())}, which may index a dimension of "
                              f"{size}")
        for i in narrowed:
            plan.setdefault(i, []).append((d, new))
        numel = rest * new
        if numel <= 2 * SLICED_NUMEL:
            break
    if not plan or numel > SLICE_FROM // 2:
        return None, "no leading dimension of the inputs can be shortened enough"
    return plan, ""


def holds_tensor(value):
    return isinstance(value, (tuple, list)) and any(isinstance(v, torch.Tensor) for v in value)


def sliced(values, plan):
    """values with each argument of plan narrowed to its first rows, copied (no view keeps the whole alive), in the
    same order of strides as given (a transposed input stays transposed)."""
    out = list(values)
    for i, cuts in plan.items():
        t = values[i].detach()
        for d, size in cuts:
            t = t.narrow(d, 0, size)
        order = sorted(range(t.dim()), key=lambda k: -t.stride()[k])  # the given layout's order of dimensions
        packed = t.permute(order).contiguous().permute([order.index(k) for k in range(t.dim())])
        out[i] = packed.clone() if packed.data_ptr() == t.data_ptr() else packed
    return out


def kept_jittered(t, i, name, base=0, contract=None):
    """jittered(t, ...), for input i: an Unkept says which input it is."""
    try:
        return jittered(t, name, base, contract)
    except Unkept as unkept:
        raise Unkept(unkept.lost, where=i) from None


def jittered_inputs(values, inputs, name, base=0):
    """values with each of inputs jittered (stream name and its position), keeping its contract; every other
    argument as it is."""
    return [kept_jittered(v, i, f"{name} {i}", base) if i in inputs else v for i, v in enumerate(values)]


def describe_shapes(values):
    return ", ".join(str(tuple(v.shape)) for v in values if isinstance(v, torch.Tensor))
