"""The right gradient, and how close to it counts as right.

With a reference (differentiable torch ops with the op's arguments), the right gradient under any
grad_outputs is the reference's, taken by autograd in float64. Without one, it comes from finite
differences: a Jacobian built once (every column, or a sample of columns for a grown input) and
reused for every grad_output. The step follows the precision the op really computes in: a kernel
that computes in float32 under float64 inputs gets a float32 step, and where even that leaves the
differences too noisy to decide, the check says "inconclusive", never "trap".

A gradient is compared relative to the right gradient's own size (its norm, and its largest
element), so a bug in small gradients is not hidden by an absolute tolerance, and a few elements far
off are not hidden by many right ones (the largest-element term sees each). With a reference, the
comparison also allows what rounding does to the same computation: the reference is run again in the
op's own dtype (and, for a float32 op, on operands rounded as TF32 products round them), and the op
may be as far from the float64 answer as a few times that. A gradient that is exactly zero in exact
arithmetic (a bias before a batch norm) or the sum of terms that cancel (a softmax under a uniform
grad_output) is then judged by the rounding its terms carry, not by its own vanishing size. Element by
element, an element off by half its own value beyond that rounding is far off, however small it is
beside the largest (a wrong branch for large negative inputs).
"""
import dataclasses
import functools
import math
import sys
import time

import torch

from .calling import UsageError, carries_gradient, clip, flatten, same_layout, seeded_call
from .strategies import BLOCK, generator, randn_flat

# Relative error that counts as right, by the dtype the gradient is computed in.
TOLERANCE = {torch.float64: 1e-7, torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 1.6e-2}
NOISY = 5e-2          # a tolerance above this decides nothing: the check says inconclusive
FORWARD_WRONG = 5e-2  # a forward farther than this from the reference is wrong (closer: held to its precision)
# Finite differences are refused past a number of calls of the op, so that whether a check runs never
# depends on how fast the machine is; a slow op is refused only past ten minutes, and told about past
# half a minute.
FD_MAX_CALLS = 4000
FD_MAX_S = 600.0
FD_NOTE_S = 30.0
SAMPLED_COLUMNS = 24  # columns of a grown input's Jacobian, besides its blocks' edges and the tail
# Past FD_MAX_CALLS, the gradient is checked along random directions instead of column by column (as
# gradcheck's fast mode and JAX's check_vjp do): <gradient, u> against the directional derivative
# (f(x + h u) - f(x - h u)) / 2h, at a cost that grows with the directions, not the elements. Some
# directions span the whole input, some only its first block, some only its last (ragged) block.
DIRECTIONS = {"every element": 8, "the first block": 2, "the last block": 2}
# The directions as the op saw them are held while they take at most this many elements together (a quarter
# of a GiB in float64), and made again from their streams each time past that.
KEPT_ELEMENTS = 1 << 25
# How many times the reference's own rounding (in the op's dtype, or under TF32 operands) the op may be off:
# the same computation in another order (atomic adds, a fused kernel) rounds differently, not worse by more.
ROUNDING_TIMES = 8
# Element by element, an element is far off when it is off by more than this share of its own value,
# beyond ROUNDING_TIMES its rounding.
FAR_OFF = 0.5
EPS64 = torch.finfo(torch.float64).eps
# Float64 ulps of the op's largest gradient element that any element may be off for nothing (Expected.floor).
ZERO_ULPS = 16


def relative_error(got, right, typical=None, allowance=0.0):
    """How far got is from right, relative to right's size, both float64 and flat, over the finite
    elements (a NaN or an infinity must stand where the right answer has the same): the larger of
    |d| / |right| (norms) and max |d| / max |right|. typical: a gradient of the same input under
    another grad_output, whose size right's counts as at least (where right is exactly 0 here, but not
    everywhere); allowance: a difference each element may have for nothing (what rounding leaves in a
    gradient that is zero in exact arithmetic), one for all or one per element; no floor otherwise, so a
    bug in small gradients is not hidden by an absolute tolerance."""
    pair = comparable(got, right)
    if pair is None:
        return float("inf")
    got, right, finite = pair
    if right.numel() == 0:  # nothing left to compare (every element at a kink, say)
        return 0.0
    d = got - right
    if isinstance(allowance, torch.Tensor):
        d = (d.abs() - allowance[finite]).clamp(min=0.0)
    elif allowance:
        d = (d.abs() - allowance).clamp(min=0.0)
    size, largest = right.norm().item(), right.abs().max().item()
    if typical is not None and typical.numel():
        typical = typical[typical.isfinite()]
        size, largest = max(size, typical.norm().item()), max(largest, typical.abs().max().item())
    if size == 0.0:
        return 0.0 if d.abs().max().item() == 0.0 else float("inf")
    return max(d.norm().item() / size, d.abs().max().item() / largest)


def ratio(a, b):
    """a / b, where 0 / 0 is 0 and anything else over 0 is infinite."""
    if a == 0.0:
        return 0.0
    return float("inf") if b == 0.0 else a / b


def comparable(got, right):
    """(got, right) over the elements both hold finite, or None where a NaN or an infinity stands where
    the right answer has none (an infinity the same, or NaN beside NaN, is agreement)."""
    special = (got.isnan() & right.isnan()) | (got.isinf() & (got == right))
    finite = got.isfinite() & right.isfinite()
    if not bool((finite | special).all()):
        return None
    return got[finite], right[finite], finite


def neighbourhood(rounding, reach=4):
    """Each element's rounding as the largest within reach elements either side (flat order): one element's
    rounding is a single draw of its size, and its neighbours' (computed alike) say what it could have been."""
    if rounding.numel() <= 1:
        return rounding
    padded = torch.nn.functional.pad(rounding.reshape(1, 1, -1), (reach, reach))
    return torch.nn.functional.max_pool1d(padded, 2 * reach + 1, stride=1).reshape(-1)


def to_tf32(t):
    """t's values rounded to the nearest TF32 number (10 explicit mantissa bits), as Hopper's and Ampere's
    tensor cores round float32 operands of a product; in float64."""
    mantissa, exponent = torch.frexp(t.detach().double())
    return torch.ldexp(torch.round(mantissa * 2048) / 2048, exponent)


def narrowest(values, widest, inputs=()):
    """The narrowest floating-point dtype below widest whose numbers every one of values (the outputs) is
    exactly: float32 outputs of a kernel that computes in bfloat16 are all bfloat16 numbers. Where the
    inputs, wider than that dtype, are themselves exact in it (integers, say), exact outputs say nothing
    about the kernel, and that dtype is passed over."""
    if values is None:
        return widest
    values = values[values.isfinite()]
    for narrow in (torch.bfloat16, torch.float16, torch.float32):
        if not values.numel() or narrow.itemsize >= widest.itemsize:
            continue
        if not torch.equal(values, values.to(narrow).double()):
            continue
        wider = [v.detach() for v in inputs if v.is_floating_point() and v.dtype.itemsize > narrow.itemsize]
        if wider and all(torch.equal(v[v.isfinite()], v[v.isfinite()].to(narrow).to(v.dtype)) for v in wider):
            continue
        return narrow
    return widest


def flat(t):
    """A tensor as float64 and flat, for comparing (None stays None)."""
    return None if t is None else t.detach().double().reshape(-1)


@dataclasses.dataclass
class Expected:
    """The right gradient for each argument (None where it takes none), float64. Where only a
    sample of a gradient is known, indices says which flat elements; tolerance per argument.
    rounding: per argument, how far the reference itself lands from its float64 answer when it computes
    in the op's dtype, element by element (None where that is not known: finite differences, or a
    reference that takes only the op's dtype); fine: the same, and under TF32 operands for a float32 op,
    for judging element by element."""
    grads: list
    indices: list
    tolerance: list
    rounding: list = None
    fine: list = None

    def __post_init__(self):
        self.rounding = self.rounding or [None] * len(self.grads)
        self.fine = self.fine or [None] * len(self.grads)

    @functools.cached_property
    def floor(self):
        """What float64 rounding alone may leave in any element of any gradient: ZERO_ULPS of the op's
        largest gradient element. A gradient that is 0 in exact arithmetic (a bias before a batch norm) is
        a sum of another gradient's elements, and carries their rounding, not its own vanishing size's;
        where the reference's rounding in the op's dtype happens to be 0 there too, this is what is left."""
        largest = max((g[g.isfinite()].abs().max().item() for g in self.grads
                       if g is not None and bool(g.isfinite().any())), default=0.0)
        return ZERO_ULPS * EPS64 * largest

    def error(self, got, i, shape):
        """got's error for argument i in units of what counts as right (above 1 is wrong): the larger of
        its error over the whole gradient in tolerances, and its worst element; inf where got is
        misshapen. None is zeros, as autograd takes it."""
        if got is not None and tuple(got.shape) != tuple(shape):
            return float("inf")
        return max(self.overall(got, i), self.worst_element(got, i))

    def _pair(self, got, i):
        g = torch.zeros_like(self.grads[i]) if got is None else self.sample(got, i).to(self.grads[i].device)
        return g, self.grads[i]

    def overall(self, got, i):
        """The error over the whole gradient, in tolerances: relative to the right gradient's norm and its
        largest element, beyond ROUNDING_TIMES the reference's own rounding in the op's dtype."""
        pair = comparable(*self._pair(got, i))
        if pair is None:
            return float("inf")
        g, right, finite = pair
        d = g - right
        if not d.numel():
            return 0.0
        tolerance, rounding = self.tolerance[i], self.rounding[i]
        rounding = torch.zeros_like(right) if rounding is None else rounding.to(right.device)[finite]
        return max(ratio(d.norm().item(), tolerance * right.norm().item() + ROUNDING_TIMES * rounding.norm().item()
                         + self.floor * math.sqrt(d.numel())),
                   ratio(d.abs().max().item(),
                         tolerance * right.abs().max().item() + ROUNDING_TIMES * rounding.abs().max().item()
                         + self.floor))

    def far_off(self, got, i):
        """Which elements (of the sample) are far off: by more than FAR_OFF of their own value, beyond
        ROUNDING_TIMES the rounding around them (an element's own rounding is one draw, and may happen to
        be 0). None where the rounding is not known."""
        fine = self.fine[i]
        if fine is None:
            return None
        g, right = self._pair(got, i)
        fine = fine.to(right.device)
        allowed = FAR_OFF * right.abs() + ROUNDING_TIMES * neighbourhood(fine) + self.floor
        d = (g - right).abs()
        agree = (g.isnan() & right.isnan()) | (g.isinf() & (g == right))
        return ~agree & ((d > allowed) | ~(d.isfinite() | agree))

    def worst_element(self, got, i):
        """1 and above where an element is far off (the count of far-off elements, so more are worse)."""
        far = self.far_off(got, i)
        return float(far.sum().item()) if far is not None else 0.0

    def sample(self, got, i):
        """What is known of got, as self.grads[i] holds it: every element, a sample of them, or its inner
        products with random directions."""
        g, index = flat(got), self.indices[i]
        if index is None:
            return g
        return index.of(g) if isinstance(index, RandomDirections) else g[index]

    def raw_error(self, got, i):
        """got's error relative to the right gradient's size (for the report's numbers), None as zeros."""
        return relative_error(*self._pair(got, i))


def graded_outputs(output):
    return [t for t in flatten(output) if carries_gradient(t)]


class Reference:
    """Autograd through the reference, in float64 where the reference takes it; and, to know what
    rounding alone does, in the op's own dtype and (for a float32 op) on TF32-rounded operands."""

    def __init__(self, op, values, reference):
        self.op, self.values, self.reference = op, values, reference
        self.dtype = torch.float64
        try:
            outs = self._outputs(torch.float64)[1]
        except Exception:  # a reference that takes only its own dtype (a Triton one, say)
            self.dtype = None
            try:
                outs = self._outputs(None)[1]
            except Exception as error:  # the reference itself is broken: the caller's to fix
                raise UsageError(f"the reference raised {type(error).__name__}: "
                                 f"{clip(error)}") from None
        self.forward = [o.detach().double() for o in outs]
        dtypes = {values[i].dtype for i in op.inputs}
        self.own = min(dtypes, key=lambda d: d.itemsize)  # the op's narrowest input dtype

    def _outputs(self, dtype, values=None):
        leaves, passed = self.op.fresh(dtype=dtype, values=self.values if values is None else values)
        outs = graded_outputs(seeded_call(self.op, passed, fn=self.reference))
        return leaves, outs

    def _grads(self, dtype, grad_outputs, values=None):
        """The reference's gradient for every argument (None where it takes none), flat float64."""
        leaves, outs = self._outputs(dtype, values)
        if len(outs) != len(grad_outputs):
            raise UsageError(f"the reference returns {len(outs)} tensor(s) that carry a gradient, the op "
                             f"{len(grad_outputs)}: they must match")
        wanted = [leaf for leaf in leaves if leaf is not None]
        gs = [g.to(o.dtype) for g, o in zip(grad_outputs, outs)]
        grads = iter(torch.autograd.grad(outs, wanted, gs, allow_unused=True))
        result = []
        for leaf in leaves:
            if leaf is None:
                result.append(None)
                continue
            g = next(grads)
            result.append(torch.zeros_like(leaf, dtype=torch.float64).reshape(-1) if g is None else flat(g))
        return result

    def rounding(self, grad_outputs, exact):
        """(rounding, fine): how far the reference lands from exact (its float64 gradients) when it computes
        in the op's dtype (a float64 op: in float32, scaled down by the two dtypes' precisions), and the
        larger of that and what TF32-rounded operands do, for a float32 op; (None, None) where the
        reference takes only its own dtype, or refuses the narrower one."""
        if self.dtype is None:
            return None, None
        narrow = torch.float32 if self.own == torch.float64 else self.own
        scale = torch.finfo(self.own).eps / torch.finfo(narrow).eps
        try:
            low = self._grads(narrow if self.own == torch.float64 else None, grad_outputs)
            tf32 = None
            if self.own == torch.float32:
                values = [to_tf32(v) if i in self.op.inputs else v for i, v in enumerate(self.values)]
                tf32 = self._grads(torch.float64, [to_tf32(g) for g in grad_outputs], values)
        except Exception:  # noqa: BLE001  (a reference that works only in float64: rounding unknown)
            return None, None
        rounding, fine = [], []
        for k, (want, got) in enumerate(zip(exact, low)):
            if want is None:
                rounding.append(None), fine.append(None)
                continue
            r = ((got.to(want.device) - want).abs() * scale).nan_to_num(0.0, 0.0, 0.0)
            r = torch.where(want.isfinite(), r, torch.zeros_like(r))
            rounding.append(r)
            t = None if tf32 is None else (tf32[k].to(want.device) - want).abs().nan_to_num(0.0, 0.0, 0.0)
            fine.append(r if t is None else torch.maximum(r, torch.where(want.isfinite(), t, torch.zeros_like(t))))
        return rounding, fine

    def expected(self, grad_outputs, tolerance):
        exact = self._grads(self.dtype, grad_outputs)
        rounding, fine = self.rounding(grad_outputs, exact)
        return Expected(exact, [None] * len(exact), tolerance, rounding, fine)

    def tf32_error(self, grad_outputs, i):
        """How far TF32-rounded operands move input i's gradient (relative), for a float32 op; else 0."""
        if self.own != torch.float32 or self.dtype is None:
            return 0.0
        exact = self._grads(torch.float64, grad_outputs)[i]
        values = [to_tf32(v) if k in self.op.inputs else v for k, v in enumerate(self.values)]
        rounded = self._grads(torch.float64, [to_tf32(g) for g in grad_outputs], values)[i]
        return relative_error(rounded, exact)


class FiniteDifferences:
    """grad_output . J, with J built once by central differences, at two steps: their disagreement
    measures the differences' own noise, and sets the tolerance."""

    def __init__(self, op, values, graded, sample=False):
        self.op, self.values, self.graded = op, values, graded
        self.dtype = torch.float64
        try:
            base = self._outputs(self._copies(torch.float64))
        except Exception:  # an op that refuses float64: difference it in its own dtype
            self.dtype = None
            base = self._outputs(self._copies(None))
        per_call = float("inf")
        for _ in range(2):  # timed after the first call, which may compile
            start = time.perf_counter()
            self._outputs(self._copies(self.dtype))
            per_call = min(per_call, time.perf_counter() - start)
        self.computed = narrowest(base, base.dtype, [values[i] for i in op.inputs])
        self.columns = {}
        for i in op.inputs:
            n = values[i].numel()
            self.columns[i] = self._sample(n, name=f"finite-difference columns of input {i}") if sample \
                else torch.arange(n, device="cpu")
        calls = sum(4 * len(c) for c in self.columns.values())  # each column at two steps, either side
        self.directions = {}  # input: its RandomDirections
        if calls > FD_MAX_CALLS:
            for i in op.inputs:
                self.directions[i] = self._directions(i)
            calls = sum(4 * len(d.plan) for d in self.directions.values())
        seconds = calls * per_call
        if seconds > FD_MAX_S:
            raise UsageError(f"finite differences would need {calls} calls of the op, about {seconds:.0f} s here "
                             f"(at most {FD_MAX_S:.0f}): pass reference=... (differentiable torch ops) or smaller "
                             f"inputs")
        if seconds > FD_NOTE_S:
            print(f"check_backward({op.name}): finite differences need {calls} calls of the op, about "
                  f"{seconds:.0f} s here; a reference=... would be faster", file=sys.stderr)
        if self.directions:
            # Along a direction every element moves at once, and a sum over them all (a loss) is rounded as the
            # kernel computes: one that casts its loads to float32 rounds a float64 call in float32 too, where
            # a float64 step moves nothing. Inputs given narrower than float64 are stepped as float32 at least.
            if self.computed == torch.float64 and any(values[i].dtype != torch.float64 for i in op.inputs):
                self.computed = torch.float32
        step = {torch.float64: 1e-6, torch.float32: 2e-3}.get(self.computed, 3e-2)  # about eps ** (1/3)
        # Each column is differenced at two steps: their disagreement measures the differences' own
        # noise, and shows an element whose steps straddle a kink (ReLU at 0, say), where there is no
        # derivative for finite differences to find: such an element is left out, never judged.
        self.jacobians, self.kinks = {}, {}
        for i in op.inputs:
            if i in self.directions:
                self.jacobians[i] = self._directional(i, step, base)
                continue
            fine, coarse, smooth = self._jacobians(i, step, self.columns[i], base)
            self.kinks[i] = int((~smooth).sum())
            self.columns[i] = self.columns[i][smooth]
            on_device = smooth.to(fine.device)
            self.jacobians[i] = (fine[on_device], coarse[on_device])

    @staticmethod
    def _sample(n, name):
        edges = {0, n - 1, n - n % BLOCK if n % BLOCK else n - BLOCK}
        for b in range(1, n // BLOCK + 1):
            edges |= {b * BLOCK - 1, min(n - 1, b * BLOCK)}
        rest = torch.randperm(n, generator=generator(name), device="cpu")[:SAMPLED_COLUMNS].tolist()
        chosen = sorted(edges | set(rest[:max(0, SAMPLED_COLUMNS - len(edges))]))
        return torch.tensor([c for c in chosen if 0 <= c < n], dtype=torch.int64, device="cpu")

    def _copies(self, dtype):
        """Fresh copies of the values, each floating-point one in dtype (its own where None), laid out
        as given: a transposed input stays transposed, so a perturbation reaches the op as it would."""
        return [same_layout(v.detach(), dtype) if isinstance(v, torch.Tensor) and v.is_floating_point()
                else (v.detach().clone() if isinstance(v, torch.Tensor) else v) for v in self.values]

    def _outputs(self, values):
        with torch.no_grad():
            everything = flatten(seeded_call(self.op, values))
            outs = [everything[k] for k in self.graded]
        if not outs:
            return torch.zeros(0, dtype=torch.float64, device="cpu")
        return torch.cat([flat(o) for o in outs])

    @staticmethod
    def _nudge(t, k, h):
        """t with its flat element k (in row-major order of its shape) moved by h, in place, whatever
        t's strides (reshape(-1) of a transposed tensor would be a copy, and the nudge lost)."""
        index = []
        for size in reversed(t.shape):
            index.append(k % size)
            k //= size
        t[tuple(reversed(index))] += h

    def _jacobians(self, i, step, columns, center):
        """The Jacobian's rows for these columns of input i by central differences, at the step and at
        twice it; and which columns are smooth. On a smooth function the two central differences agree
        but for rounding, and the gap between the one-sided slopes doubles with the step. Across a kink
        neither holds: at ReLU's 0 the slopes either side are 1 and 0 at any step, their mean 0.5."""
        x = flat(self.values[i]).cpu()
        eps = torch.finfo(self.computed).eps if self.computed.is_floating_point else 0.0
        largest = center.abs().nan_to_num(0.0).max().item() if center.numel() else 0.0
        # The step follows each element's size, and never falls below the input's typical size (a step of
        # a thousandth of 1e-3 is not the step of a thousandth of 1); an infinite element (a -inf mask)
        # has no neighbourhood to difference, and is left out like a kink.
        finite = x[x.isfinite()]
        typical = finite.norm().item() / max(1, finite.numel()) ** 0.5 if finite.numel() else 1.0
        scale = {k: max(abs(x[k].item()), typical or 1.0) for k in columns.tolist()}
        rows, gaps = {1: [], 2: []}, {1: [], 2: []}
        for k in columns.tolist():
            for factor in (1, 2):
                if not math.isfinite(x[k].item()):
                    rows[factor].append(torch.full_like(center, float("nan")))
                    gaps[factor].append(torch.full_like(center, float("nan")))
                    continue
                h = factor * step * scale[k]
                plus, minus = self._copies(self.dtype), self._copies(self.dtype)
                self._nudge(plus[i], k, h)
                self._nudge(minus[i], k, -h)
                up, down = self._outputs(plus), self._outputs(minus)
                rows[factor].append((up - down) / (2 * h))
                gaps[factor].append((up - 2 * center + down) / h)  # right slope minus left slope
        if not columns.numel():
            empty = torch.zeros(0, center.numel(), dtype=torch.float64, device=center.device)
            return empty, empty, torch.zeros(0, dtype=torch.bool, device="cpu")
        fine, coarse = torch.stack(rows[1]), torch.stack(rows[2])
        gap_fine, gap_coarse = torch.stack(gaps[1]), torch.stack(gaps[2])
        steps = torch.tensor([step * scale[k] for k in columns.tolist()],
                             dtype=torch.float64, device=fine.device)
        # Rounding moves a one-sided slope by about eps * |output| / step; a thousandth of the steepest
        # slope is far more than curvature changes a central difference over one step.
        allowed = 1e-3 * fine.abs().nan_to_num(0.0).max().item() + 8 * eps * largest / steps
        central = (coarse - fine).abs().nan_to_num(0.0).amax(dim=1)
        doubling = (gap_coarse - 2 * gap_fine).abs().nan_to_num(0.0).amax(dim=1)
        smooth = ((central <= allowed) & (doubling <= allowed)).cpu() & x[columns].isfinite()
        return fine, coarse, smooth

    @property
    def along_directions(self):
        return bool(self.directions)

    def _directions(self, i):
        """Random directions for input i, each element moved in proportion to its own size (never below the
        input's typical size), drawn one at a time on the input's device when asked for, never held all at
        once: twelve directions of a large input are more memory than the input. An element that is
        exactly 0 (a ReLU's kink, a padded zero) or not finite stays where it is, so no direction crosses a
        kink there."""
        x = flat(self.values[i].detach())
        n = x.numel()
        finite = x[x.isfinite()]
        typical = (finite.norm().item() / max(1, finite.numel()) ** 0.5) or 1.0
        scale = torch.where(x.isfinite() & (x != 0), x.abs().clamp(min=typical), torch.zeros_like(x))
        tail = n - n % BLOCK if n % BLOCK else max(0, n - BLOCK)
        spans = {"every element": (0, n), "the first block": (0, min(n, BLOCK)), "the last block": (tail, n)}
        plan = []
        for label, count in DIRECTIONS.items():
            if label != "every element" and n <= BLOCK:
                continue
            start, stop = spans[label]
            plan += [(label, start, stop, f"finite-difference directions {i} {label} {k}") for k in range(count)]
        return RandomDirections(self, i, scale, plan)

    def moved(self, i, u, h):
        """Direction u of input i as the op sees it at step h: (x + h u) - (x - h u), over 2 h, after its
        dtype rounded both."""
        plus, minus = (same_layout(self.values[i].detach(), self.dtype) for _ in range(2))
        shift = (h * u).reshape(plus.shape).to(dtype=plus.dtype)
        plus.add_(shift)
        minus.sub_(shift)
        return (flat(plus) - flat(minus)) / (2 * h)

    def _directional(self, i, step, center):
        """Directional derivatives of input i along its directions, at the step and twice it: (fine, coarse)
        rows (one a direction, over the outputs), less the directions whose steps straddle a kink."""
        directions = self.directions[i]
        eps = torch.finfo(self.computed).eps if self.computed.is_floating_point else 0.0
        largest = center.abs().nan_to_num(0.0).max().item() if center.numel() else 0.0
        rows, gaps = {1: [], 2: []}, {1: [], 2: []}
        for k in range(len(directions.plan)):
            u = directions.unit(k)
            for factor in (1, 2):
                h = factor * step
                plus, minus = self._copies(self.dtype), self._copies(self.dtype)
                shift = (h * u).reshape(plus[i].shape).to(device=plus[i].device, dtype=plus[i].dtype)
                plus[i].add_(shift)
                minus[i].sub_(shift)
                up, down = self._outputs(plus), self._outputs(minus)
                rows[factor].append((up - down) / (2 * h))
                gaps[factor].append((up - 2 * center + down) / h)
            del u
        fine, coarse = torch.stack(rows[1]), torch.stack(rows[2])
        gap_fine, gap_coarse = torch.stack(gaps[1]), torch.stack(gaps[2])
        allowed = 1e-3 * fine.abs().nan_to_num(0.0).max().item() + 8 * eps * largest / step
        central = (coarse - fine).abs().nan_to_num(0.0).amax(dim=1)
        doubling = (gap_coarse - 2 * gap_fine).abs().nan_to_num(0.0).amax(dim=1)
        # A direction along which no output moved at either step says nothing of a derivative below the op's
        # resolution (a float32 loss of a large input, a block of ignored rows): it is left out, as a kink is.
        moved = ((fine != 0) | (coarse != 0)).any(dim=1)
        smooth = ((central <= allowed) & (doubling <= allowed) & moved).cpu()
        self.kinks[i] = int((~smooth).sum())
        directions.keep([k for k, keep in enumerate(smooth.tolist()) if keep], step)
        on_device = smooth.to(fine.device)
        return fine[on_device], coarse[on_device]

    def expected(self, grad_outputs, tolerance):
        g = torch.cat([flat(t) for t in grad_outputs])
        grads, indices, tolerances = [], [], []
        for i in range(len(self.values)):
            if i not in self.jacobians:
                grads.append(None), indices.append(None), tolerances.append(tolerance[i])
                continue
            fine_j, coarse_j = (j.to(g.device) for j in self.jacobians[i])
            fine = fine_j @ g
            noise = relative_error(coarse_j @ g, fine)
            if not len(fine) and self.values[i].numel():  # every element at a kink: nothing to judge by
                noise = float("inf")
            grads.append(fine)
            if i in self.directions:
                indices.append(self.directions[i])
            else:
                full = len(self.columns[i]) == self.values[i].numel()
                indices.append(None if full else self.columns[i].to(g.device))
            tolerances.append(max(tolerance[i], TOLERANCE.get(self.computed, 1e-4) * 10, 8 * noise))
        return Expected(grads, indices, tolerances)


class RandomDirections:
    """Input i's random directions: each drawn when asked for, on the input's device, from a stream of its
    own (so the same direction comes back every time); as an Expected's indices entry, what is known of a
    gradient checked along them is its inner product with each direction the op saw (after its dtype's
    rounding), for the directions kept (those whose steps straddle no kink). The directions as the op saw
    them are kept while they take at most KEPT_ELEMENTS elements together, and made again past that."""

    def __init__(self, differences, i, scale, plan):
        self.differences, self.i, self.scale, self.plan = differences, i, scale, plan
        self.kept, self.step, self._seen = list(range(len(plan))), None, {}

    @property
    def labels(self):
        return [self.plan[k][0] for k in self.kept]

    def unit(self, k):
        _, start, stop, name = self.plan[k]
        z = randn_flat(self.scale.numel(), self.scale.device, name)
        z[:start] = 0.0
        z[stop:] = 0.0
        return z * self.scale

    def keep(self, kept, step):
        self.kept, self.step = kept, step
        self._seen = {}
        if len(kept) * self.scale.numel() <= KEPT_ELEMENTS:
            self._seen = {k: self.seen(k) for k in kept}

    def seen(self, k):
        if k in self._seen:
            return self._seen[k]
        return self.differences.moved(self.i, self.unit(k), self.step)

    def of(self, gradient):
        gradient = gradient.to(torch.float64)
        if not self.kept:
            return torch.zeros(0, dtype=torch.float64, device=gradient.device)
        return torch.stack([torch.dot(self.seen(k).to(gradient.device), gradient) for k in self.kept])

    def spanning(self, label):
        return torch.tensor([lab == label for lab in self.labels], dtype=torch.bool, device=self.scale.device)


def dtype_tolerance(v):
    return TOLERANCE.get(v.dtype, 1e-4) if isinstance(v, torch.Tensor) and v.is_floating_point() else 0.0


class Truth:
    """The right gradients for any grad_outputs, at one set of argument values: the reference's, by
    autograd in float64, or finite differences of the op itself."""

    def __init__(self, op, values, reference, graded, sample=False):
        self.op, self.values = op, values
        self.base = [dtype_tolerance(v) for v in values]
        self.source = Reference(op, values, reference) if reference is not None else \
            FiniteDifferences(op, values, graded, sample=sample)

    @property
    def by_reference(self):
        return isinstance(self.source, Reference)

    def describe(self):
        """Which truth judged the gradients, for the report's last line."""
        if self.by_reference:
            return "the reference, in float64" if self.source.dtype == torch.float64 else "the reference"
        if self.source.along_directions:
            count = max(len(d.labels) for d in self.source.directions.values())
            return f"finite differences along {count} random directions an input"
        return "finite differences"

    def forward_error(self, op_outputs):
        """The op's forward against the reference's (relative); None without a reference."""
        if not self.by_reference:
            return None
        ours = [flat(o) for o in op_outputs]
        theirs = [o.reshape(-1) for o in self.source.forward]
        if len(ours) != len(theirs) or any(a.shape != b.shape for a, b in zip(ours, theirs)):
            raise UsageError(f"the reference returns {len(theirs)} output(s) of shapes "
                             f"{[tuple(t.shape) for t in self.source.forward]}, the op {len(ours)} of shapes "
                             f"{[tuple(o.shape) for o in op_outputs]}: they must match")
        return max((relative_error(a, b.to(a.device)) for a, b in zip(ours, theirs)), default=0.0)

    def calibrate(self, forward_error):
        """Widens the tolerance to the op's own forward error against the reference (a kernel that
        computes in TF32, say): a backward is held to the precision its forward achieves."""
        self.base = [max(t, 4 * forward_error) if t else t for t in self.base]

    def expected(self, grad_outputs):
        return self.source.expected([g.detach().contiguous() for g in grad_outputs], list(self.base))

    def tf32_error(self, grad_outputs, i):
        """How far TF32-rounded operands alone move input i's right gradient (relative); 0 where unknown."""
        if not self.by_reference:
            return 0.0
        return self.source.tf32_error([g.detach().contiguous() for g in grad_outputs], i)
