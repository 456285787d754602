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

The op's own noise, measured from the op (context.Context.own_noise: its gradient for a + b against its
gradients for a and for b, and for a grad_output laid out otherwise), is allowed beside the reference's
rounding: an op that rounds where the reference does not (a float16 kernel that accumulates in float32 and
rounds its output, TF32 products in a chunked scan) is judged by what its own rounding does, element by
element and over the whole gradient, never by a rule that its own noise alone breaks.
"""
import dataclasses
import functools
import math
import sys
import time

import torch

from ..calling import (REFERENCE_CALL, OutOfMemory, UsageError, carries_gradient, clip, flatten, holds_tensors,
                       out_of_memory, same_layout, seeded_call, seeded_grad, tensors_afresh)
from ..contracts import all_finite, finite_elements, found, projection
from ..strategies import BLOCK, generator, randn_flat

# Relative error that counts as right, by the dtype the gradient is computed in.
TOLERANCE = {torch.float64: 1e-7, torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 1.6e-2}
NOISY = 5e-2          # a tolerance above this decides nothing: the check says inconclusive
FORWARD_WRONG = 5e-2  # a forward farther than this from the reference is wrong (closer: held to its precision)
# Finite differences step every element (four calls of the op each) up to FD_MAX_CALLS calls, and go along
# random directions past that, so that how a check runs never depends on how fast the machine is; a slow op is
# refused only past ten minutes, and told about past half a minute. Up to 256 elements: at 4,000 calls (1,000
# elements) a check of a 1,000-element softplus called the op 4,162 times, 13,700 times the op's forward and
# backward on one CPU core, where twelve directions call it about a hundred times (benchmarks/check_cost.py).
FD_MAX_CALLS = 1024
FD_COLUMNS_WHERE_NOISY = 4000  # see FiniteDifferences.__init__
FD_MAX_S = 600.0
FD_NOTE_S = 30.0
SAMPLED_COLUMNS = 24  # columns of a grown input's Jacobian, besides its blocks' edges and the tail
# The forward's own noise (FiniteDifferences.forward_noise) is measured at steps NOISE_LEVELS times apart; a level
# whose fourth difference grows less than NOISE_GROWTH times by the next is noise, not the forward's curvature (65536
# times) or kinks (64 times). Where it is more than NOISE_ABOVE_EPS of the dtype's epsilons of the outputs' size, the
# columns are differenced at a step of STEP_SHARE times its cube root (relative), at most WIDEST_STEP.
NOISE_LEVELS = 16
NOISE_GROWTH = 32
NOISE_ABOVE_EPS = 64
STEP_SHARE = 0.3
WIDEST_STEP = 0.05
# Past FD_MAX_CALLS, the gradient is checked along random directions instead of column by column (as
# gradcheck's fast mode and JAX's check_vjp do): <gradient, u> against the directional derivative
# (f(x + h u) - f(x - h u)) / 2h, at a cost that grows with the directions, not the elements. Some
# directions span the whole input, some only its first block, some only its last (ragged) block.
DIRECTIONS = {"every element": 8, "the first block": 2, "the last block": 2}
# An input checked whole only for what its size can change, its other checks made on a slice that takes DIRECTIONS
# again (runner.WHOLE), goes along fewer: a part past a size wrong, a tail or a first block, moves these as far as
# every direction of DIRECTIONS.
WHOLE_DIRECTIONS = {"every element": 2, "the first block": 1, "the last block": 1}
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
# How many times its own measured noise (one draw of three calls' rounding, so larger than one call's) the whole
# gradient may be off, in norm. Its largest element, and each element, may be off by ROUNDING_TIMES the noise there,
# as by the reference's rounding: an element's noise is one draw of its size.
NOISE_TIMES = 2
# An element whose own noise is within this many ulps of its dtype of the op's value there, and whose reference
# rounding within twice that of the right value, is judged by that rounding alone, not by its neighbourhood's: a
# softplus gradient of 1e-11 far below 0, beside gradients of 0.5 whose rounding is 1e-8, is wrong when it is 2e-11.
# A correctly rounded product is within 1.5 ulps, measured as the op's noise (three answers' rounding); a
# cancellation whose rounding is larger than its value is settled only where five draws of it all fall short.
SETTLED_ULPS = 2


def relative_error(got, right, typical=None, allowance=0.0):
    """How far got is from right, relative to right's size, both float64 and flat, over the finite
    elements (a NaN or an infinity must stand where the right answer has the same): the larger of
    |d| / |right| (norms) and max |d| / max |right|. typical: a gradient of the same input under
    another grad_output, whose size right's counts as at least (where right is exactly 0 here, but not
    everywhere); allowance: a difference each element may have for nothing (what rounding leaves in a
    gradient that is zero in exact arithmetic), one for all or one per element; no floor otherwise, so a
    bug in small gradients is not hidden by an absolute tolerance. typical may also be given as its extent()."""
    if same_values(got, right):
        return 0.0  # nothing apart, so nothing to measure (the usual answer of two of the op's own calls)
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
    if typical is not None:
        typical_size, typical_largest = typical if isinstance(typical, tuple) else extent(typical)
        size, largest = max(size, typical_size), max(largest, typical_largest)
    if size == 0.0:
        return 0.0 if d.abs().max().item() == 0.0 else float("inf")
    return max(d.norm().item() / size, d.abs().max().item() / largest)


def same_values(got, right):
    """Whether got and right hold the same values, element for element (never where a NaN stands: torch.equal
    reads NaN as unequal to itself, and then the comparison goes the long way, which knows NaN beside NaN)."""
    return (isinstance(got, torch.Tensor) and isinstance(right, torch.Tensor) and got.shape == right.shape
            and got.dtype == right.dtype and got.device == right.device and torch.equal(got, right))


def extent(t):
    """(norm, largest absolute value) of t's finite elements: (0.0, 0.0) where it has none."""
    finite = finite_elements(t)
    if not finite.numel():
        return 0.0, 0.0
    return finite.norm().item(), finite.abs().max().item()


def ratio(a, b):
    """a / b, where 0 / 0 is 0 and anything else over 0 is infinite."""
    if a == 0.0:
        return 0.0
    return float("inf") if b == 0.0 else a / b


def comparable(got, right):
    """(got, right, mask) over the elements both hold finite (mask picks them out of a tensor of got's shape), or
    None where a NaN or an infinity stands where the right answer has none (an infinity the same, or NaN beside
    NaN, is agreement)."""
    if all_finite(got, right):
        # The usual case, and a third of a large check's comparing: nothing to pick out, so nothing copied. The
        # mask returned is `...`, which picks every element of whatever it indexes (a view, not a copy).
        return got, right, ...
    finite = got.isfinite() & right.isfinite()
    if bool(finite.all()):  # finite elements whose sum overflows
        return got, right, ...
    special = (got.isnan() & right.isnan()) | (got.isinf() & (got == right))
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
    values = finite_elements(values)
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


def outputs_row(outs):
    """outs flat in float64, one after another, in memory of its own (finite differences write in it). One plain
    tensor takes no torch.cat (most of the rest of a small op's call): flat() copies it, unless it was float64 and
    flat already, and then it is copied here. A tensor subclass (one without storage: a DTensor, a fake tensor) is
    concatenated, as every output was before."""
    if len(outs) == 1 and type(outs[0]) is torch.Tensor:
        row = flat(outs[0])
        return row.clone() if row.data_ptr() == outs[0].data_ptr() else row
    return torch.cat([flat(o) for o in outs])


class Later:
    """A value per argument, worked out the first time one is asked for. The reference's rounding takes two more
    backwards of the reference (in the op's dtype, and on TF32-rounded operands), which a comparison needs only
    where it judges: the right gradient's size alone (Context.typical) needs neither, and a gradient with no
    element far off even beside the rounding in the op's dtype alone needs no TF32 one (Expected.far_off)."""

    def __init__(self, work_out):
        self._work_out, self._values = work_out, None

    @property
    def known(self):
        return self._values is not None

    @property
    def values(self):
        if self._values is None:
            self._values, self._work_out = self._work_out(), None
        return self._values

    def __getitem__(self, i):
        return self.values[i]

    def __len__(self):
        return len(self.values)

    def __iter__(self):
        return iter(self.values)


@dataclasses.dataclass
class Expected:
    """The right gradient for each argument (None where it takes none), float64. Where only a
    sample of a gradient is known, indices says which flat elements; tolerance per argument.
    rounding: per argument, how far the reference itself lands from its float64 answer when it computes
    in the op's dtype, element by element (None where that is not known: finite differences, or a
    reference that takes only the op's dtype); fine: the same, and under TF32 operands for a float32 op,
    for judging element by element. projected: per argument, the part of a gradient its values' contract lets
    through (contracts.py: a symmetric matrix's symmetric part), which grads holds and every gradient judged
    is taken to first; None where the whole gradient counts. noise: per argument, the op's own measured noise
    in each element at this grad_output's size (None where not measured); settled: where it was, the elements
    whose noise is within SETTLED_ULPS ulps of the op's own value there; dtypes: each argument's gradient
    dtype, whose smallest steps near 0 no gradient can be judged closer than."""
    grads: list
    indices: list
    tolerance: list
    rounding: list = None
    fine: list = None
    projected: list = None
    noise: list = None
    settled: list = None
    dtypes: list = None

    def __post_init__(self):
        # (`is None`, not `or`: a Later's length would work it out)
        self.rounding = [None] * len(self.grads) if self.rounding is None else self.rounding
        self.fine = [None] * len(self.grads) if self.fine is None else self.fine
        self.projected = self.projected or [None] * len(self.grads)
        self.noise = [None] * len(self.grads) if self.noise is None else self.noise
        self.settled = [None] * len(self.grads) if self.settled is None else self.settled
        self.dtypes = self.dtypes or [None] * len(self.grads)

    def judged_with(self, noise, settled, dtypes):
        """The same right gradients, judged beside the op's own noise (context.Context.own_noise)."""
        return dataclasses.replace(self, noise=noise, settled=settled, dtypes=dtypes)

    def unmeasured(self, i):
        """What an element of argument i may be off by where nothing measures its rounding (the op's own noise
        is not settled there): one ulp of i's dtype at the op's largest gradient element, what rounding in
        that dtype can leave in any element. A float16 or bfloat16 gradient that is 0 in exact arithmetic
        (the first query of a causal attention attends to itself alone), computed in float32 and rounded,
        comes back as float32 rounding, where the reference computes an exact 0 and the op's answer was
        exactly 0 each time its noise was measured."""
        dtype = self.dtypes[i]
        if dtype is None or not dtype.is_floating_point:
            return 0.0
        return torch.finfo(dtype).eps * self.largest

    @functools.cached_property
    def largest(self):
        """The op's largest right gradient element, over every argument."""
        finite = [finite_elements(g) for g in self.grads if g is not None]
        return max((g.abs().max().item() for g in finite if g.numel()), default=0.0)

    @functools.cached_property
    def floor(self):
        """What float64 rounding alone may leave in any element of any gradient: ZERO_ULPS of the op's
        largest gradient element. A gradient that is 0 in exact arithmetic (a bias before a batch norm) is
        a sum of another gradient's elements, and carries their rounding, not its own vanishing size's;
        where the reference's rounding in the op's dtype happens to be 0 there too, this is what is left."""
        return ZERO_ULPS * EPS64 * self.largest

    def error(self, got, i, shape):
        """got's error for argument i in units of what counts as right (above 1 is wrong): the larger of
        its error over the whole gradient in tolerances, and its worst element; inf where got is
        misshapen. None is zeros, as autograd takes it. Exact above 1; at or below 1 it may be a bound of it
        (overall), so it says right or wrong, and how wrong, never how right."""
        if got is not None and tuple(got.shape) != tuple(shape):
            return float("inf")
        return max(self.overall(got, i), self.worst_element(got, i))

    def _pair(self, got, i):
        g = torch.zeros_like(self.grads[i]) if got is None else self.sample(got, i).to(self.grads[i].device)
        return g, self.grads[i]

    def overall(self, got, i):
        """The error over the whole gradient, in tolerances: relative to the right gradient's norm and its
        largest element, beyond ROUNDING_TIMES the reference's own rounding in the op's dtype and the op's own
        noise. Where either is not yet worked out (a Later), the error without it comes first: each only widens
        what is allowed, so the error without it is never less than with it, and where that is at most 1 it is
        returned as it is: neither the reference's backward in the op's dtype nor the op's own noise calls are
        made (a right gradient's usual answer)."""
        pair = comparable(*self._pair(got, i))
        if pair is None:
            return float("inf")
        g, right, finite = pair
        d = g - right
        if not d.numel():
            return 0.0

        def known(later, work_out=True):
            """Argument i's entry of later, on right's device and at its finite elements; None where it is not
            known yet and work_out is False, or known to be none."""
            if not work_out and isinstance(later, Later) and not later.known:
                return None
            entry = later[i]
            return None if entry is None else entry.to(right.device)[finite]

        if any(isinstance(later, Later) and not later.known for later in (self.rounding, self.noise)):
            bound = self._overall(i, d, right, known(self.rounding, False), known(self.noise, False))
            if bound <= 1.0:
                return bound
        return self._overall(i, d, right, known(self.rounding), known(self.noise))

    def _overall(self, i, d, right, rounding, noise):
        tolerance = self.tolerance[i]
        floor = self.floor
        rounding_norm, rounding_max = (0.0, 0.0) if rounding is None else (rounding.norm().item(),
                                                                           rounding.abs().max().item())
        noise_norm, noise_max = (0.0, 0.0) if noise is None else (noise.norm().item(), noise.abs().max().item())
        # Over the whole gradient the op's noise widens its tolerance at most twofold: a float32 op that rounds its
        # gradient to float16 is as noisy as float16, and that is its bug, not its precision.
        noisy = min(NOISE_TIMES * noise_norm, tolerance * right.norm().item())
        return max(ratio(d.norm().item(), tolerance * right.norm().item() + ROUNDING_TIMES * rounding_norm
                         + noisy + floor * math.sqrt(d.numel())),
                   ratio(d.abs().max().item(),
                         tolerance * right.abs().max().item() + ROUNDING_TIMES * rounding_max
                         + ROUNDING_TIMES * noise_max + floor))

    def local_rounding(self, i, right, fine):
        """Each element's rounding, times ROUNDING_TIMES: the larger of the reference's (fine) and the op's own
        noise, taken as its neighbourhood's (an element's own rounding is one draw, and may happen to be 0),
        and at least what rounding in its dtype can leave anywhere (unmeasured); but an element whose
        rounding, the reference's and the op's, is settled (within SETTLED_ULPS ulps of its value) is judged
        by its own alone, so that a small gradient beside large ones is judged by its own size. It grows with
        fine, element by element: the settled elements' share is never more than the others' would be."""
        fine, noise = fine.to(right.device), self.noise[i]
        own = fine if noise is None else torch.maximum(fine, noise.to(right.device))
        around = ROUNDING_TIMES * neighbourhood(own) + self.unmeasured(i)
        if self.settled[i] is None:
            return around
        # The reference settles an element by its rounding in the op's dtype, not under TF32 operands, which move a
        # softplus gradient at x = -20 by 1% (its exponent's rounding): the op's own noise tells a TF32 kernel.
        eps = torch.finfo(self.dtypes[i]).eps
        rounding = fine if self.rounding[i] is None else self.rounding[i].to(right.device)
        settled = self.settled[i].to(right.device) & (rounding <= 2 * SETTLED_ULPS * eps * right.abs())
        return torch.where(settled, ROUNDING_TIMES * own, around)

    def far_off(self, got, i):
        """Which elements (of the sample) are far off: by more than FAR_OFF of their own value, beyond
        ROUNDING_TIMES their rounding (local_rounding: the reference's and the op's own). None where the
        reference's rounding is not known."""
        if self.rounding[i] is None:
            return None
        return self._far_off(i, *self._suspects(got, i))

    def _suspects(self, got, i):
        """(right, |got - right|, where they agree on a NaN or an infinity, the suspects): no element's rounding
        is below 0, so only an element off by more than FAR_OFF of its value beyond the floor can be far off."""
        g, right = self._pair(got, i)
        d = (g - right).abs()
        if all_finite(g, right):  # the usual case: nothing to agree on, and d is infinite only where it overflowed
            return right, d, torch.zeros_like(d, dtype=torch.bool), d > FAR_OFF * right.abs() + self.floor
        agree = (g.isnan() & right.isnan()) | (g.isinf() & (g == right))
        return right, d, agree, ~agree & ((d > FAR_OFF * right.abs() + self.floor) | ~(d.isfinite() | agree))

    def _far_off(self, i, right, d, agree, suspects):
        if not bool(suspects.any()):  # every element within FAR_OFF of its value: the usual answer, found in a pass
            return suspects

        def beyond(fine):
            allowed = FAR_OFF * right.abs() + self.local_rounding(i, right, fine) + self.floor
            return ~agree & ((d > allowed) | ~(d.isfinite() | agree))

        if isinstance(self.fine, Later) and not self.fine.known:
            # The rounding in the op's dtype alone is at most fine in every element (fine is the larger of it and
            # the TF32 one), so it allows less: where no element is far off even so, none is beside fine, and
            # the reference's TF32 backward is never made.
            far = beyond(self.rounding[i])
            if not bool(far.any()):
                return far
        if self.fine[i] is None:
            return None
        return beyond(self.fine[i])

    def worst_element(self, got, i):
        """1 and above where an element is far off (the count of far-off elements, so more are worse). Where no
        element is a suspect (_suspects), 0 without the reference's rounding, known or not."""
        if self.grads[i] is None or (not isinstance(self.rounding, Later) and self.rounding[i] is None):
            return 0.0
        right, d, agree, suspects = self._suspects(got, i)
        if not bool(suspects.any()) or self.rounding[i] is None:
            return 0.0
        far = self._far_off(i, right, d, agree, suspects)
        return float(far.sum().item()) if far is not None else 0.0

    def sample(self, got, i):
        """What is known of got, as self.grads[i] holds it: every element, a sample of them, or its inner
        products with random directions."""
        if self.projected[i] is not None:
            got = self.projected[i](got)
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
        except Exception:  # noqa: BLE001  a reference that takes only its own dtype (a Triton one, say)
            self.dtype = None
            try:
                outs = self._outputs(None)[1]
            except Exception as error:  # the reference itself is broken: the caller's to fix
                if out_of_memory(error):  # unless it found no room beside the checker's copies
                    raise OutOfMemory(REFERENCE_CALL, error) from error
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
        grads = iter(seeded_grad(outs, wanted, gs, allow_unused=True))
        result = []
        for leaf in leaves:
            if leaf is None:
                result.append(None)
                continue
            g = next(grads)
            result.append(torch.zeros_like(leaf, dtype=torch.float64).reshape(-1) if g is None else flat(g))
        return result

    def rounding(self, grad_outputs, exact):
        """How far the reference lands from exact (its float64 gradients) when it computes in the op's dtype (a
        float64 op: in float32, scaled down by the two dtypes' precisions), element by element; None for each
        argument where the reference takes only its own dtype, or refuses the narrower one."""
        unknown = [None] * len(exact)
        if self.dtype is None:
            return unknown
        narrow = torch.float32 if self.own == torch.float64 else self.own
        scale = torch.finfo(self.own).eps / torch.finfo(narrow).eps
        try:
            low = self._grads(narrow if self.own == torch.float64 else None, grad_outputs)
        except Exception:  # noqa: BLE001  (a reference that works only in float64: rounding unknown)
            return unknown
        return [None if want is None else apart(got, want) * scale for want, got in zip(exact, low)]

    def fine(self, grad_outputs, exact, rounding):
        """The larger of rounding and what TF32-rounded operands do to the reference, for a float32 op (a
        float32 tl.dot computes in TF32 by default, on a GPU and in Triton's interpreter); rounding itself
        otherwise, and where the reference refuses the rounded operands."""
        if self.own != torch.float32 or all(r is None for r in rounding):
            return list(rounding)
        values = [to_tf32(v) if i in self.op.inputs else v for i, v in enumerate(self.values)]
        try:
            tf32 = self._grads(torch.float64, [to_tf32(g) for g in grad_outputs], values)
        except Exception:  # noqa: BLE001  (the reference refuses the rounded values: the op's dtype's rounding)
            return list(rounding)
        return [r if r is None else torch.maximum(r, apart(t, want)) for r, t, want in zip(rounding, tf32, exact)]

    def expected(self, grad_outputs, tolerance):
        exact = self._grads(self.dtype, grad_outputs)
        held = list(exact)  # as the reference gave them: Truth.expected projects Expected.grads in place
        rounding = Later(lambda: self.rounding(grad_outputs, held))
        fine = Later(lambda: self.fine(grad_outputs, held, rounding))
        return Expected(exact, [None] * len(exact), tolerance, rounding, fine)

    def tf32_error(self, grad_outputs, i):
        """How far TF32-rounded operands move input i's gradient (relative), for a float32 op; else 0."""
        if self.own != torch.float32 or self.dtype is None:
            return 0.0
        exact = self._grads(torch.float64, grad_outputs)[i]
        values = [to_tf32(v) if k in self.op.inputs else v for k, v in enumerate(self.values)]
        rounded = self._grads(torch.float64, [to_tf32(g) for g in grad_outputs], values)[i]
        return relative_error(rounded, exact)


def apart(got, want):
    """|got - want|, element by element, where want is finite (0 elsewhere, and where got is not)."""
    d = (got.to(want.device) - want).abs().nan_to_num(0.0, 0.0, 0.0)
    return torch.where(want.isfinite(), d, torch.zeros_like(d))


def same_picks(these, those):
    """Whether two calls of the op picked alike: the same integer and boolean outputs."""
    return len(these) == len(those) and all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(these, those))


def within_bounds(contract, x, moved, step):
    """The largest share (at most 1) of a move of x by moved (both flat, float64) that stays inside the contract's
    bounds (non-negative, within [0, 1]) at twice the step, with room to spare; 0 where an element at a bound
    would move."""
    room = contract.boundaries(x)
    moving = moved != 0
    if not bool(moving.any()):
        return 1.0
    return min(1.0, (room[moving] / (4 * step * moved[moving].abs())).min().item())


class FiniteDifferences:
    """grad_output . J, with J built once by central differences, at two steps: their disagreement
    measures the differences' own noise, and sets the tolerance."""

    def __init__(self, op, values, graded, sample=False, contracts=None, directions=None):
        self.op, self.values, self.graded = op, values, graded
        self.direction_counts = DIRECTIONS if directions is None else directions
        self.contracts = contracts if contracts is not None else {i: found(values[i]) for i in op.inputs}
        self.dtype = torch.float64
        try:
            base, self.picked = self._call(self._copies(torch.float64))
            if not same_picks(self._call(self._copies(None))[1], self.picked):
                raise ValueError("float64 picks otherwise")
        except Exception:  # noqa: BLE001  an op refusing float64, or picking otherwise in it: its own dtype
            # (a pivot among values tied in float32 and not in float64 makes float64 differences another selection's)
            self.dtype = None
            base, self.picked = self._call(self._copies(None))
        per_call = float("inf")
        for _ in range(2):  # timed after the first call, which may compile
            start = time.perf_counter()
            self._outputs(self._copies(self.dtype))
            per_call = min(per_call, time.perf_counter() - start)
        self.computed = narrowest(base, base.dtype, [values[i] for i in op.inputs])
        computed = self.computed
        self._difference(base, per_call, sample, FD_MAX_CALLS)
        if self._directions_undecided() and self._column_calls(sample) <= FD_COLUMNS_WHERE_NOISY:
            # Along directions too noisy to decide (a softmax peaked in float32, where every element's step moves
            # the peak at once), where the columns fit the budget they had before directions took over at 256
            # elements: column by column, as then.
            self.computed = computed
            self._difference(base, per_call, sample, FD_COLUMNS_WHERE_NOISY)

    def _columns_of(self, i, sample):
        n = self.values[i].numel()
        columns = (self._sample(n, name=f"finite-difference columns of input {i}") if sample
                   else torch.arange(n, device="cpu"))
        if sample and self.op.slots[i].parts:  # a complex element's two parts together (complex_parts)
            columns = torch.unique(torch.cat([columns - columns % 2, columns - columns % 2 + 1]))
        return self._within_contract(i, columns)

    def _column_calls(self, sample):
        return sum(4 * len(self._columns_of(i, sample)) for i in self.op.inputs)

    def _directions_undecided(self):
        """Whether an input that went along directions for the budget's sake (not for its columns' noise) came out
        near too noisy to judge by, or with every direction left out."""
        for i in self.budgeted:
            fine, coarse = self.jacobians[i]
            # an eighth of what would leave it undecided: the check's own grad_output is not this random one, and
            # along a few directions their disagreement differs from one grad_output to the next several times over
            if (not len(fine) and self.values[i].numel()) or self._too_noisy(fine, coarse, share=1 / 8):
                return True
        return False

    def _difference(self, base, per_call, sample, max_calls):
        """The Jacobians (column by column where the columns take at most max_calls calls, else along directions),
        their kinks and noise."""
        op, values = self.op, self.values
        self.columns = {i: self._columns_of(i, sample) for i in op.inputs}
        calls = sum(4 * len(c) for c in self.columns.values())  # each column at two steps, either side
        self.directions = {}  # input: its RandomDirections
        if calls > max_calls:
            # Along a direction one wrong element of an input is diluted by that input's other elements, so the
            # budget is each input's own: where all the columns together fit the budget they had before directions
            # took over at 256 elements, an input whose own columns fit goes column by column (two 200-element
            # inputs, as before), and only a larger one along directions. Never more calls than before.
            mixed = calls <= FD_COLUMNS_WHERE_NOISY
            for i in op.inputs:
                if not (mixed and 4 * len(self.columns[i]) <= max_calls):
                    self.directions[i] = self._directions(i)
            calls = (sum(4 * len(d.plan) for d in self.directions.values())
                     + sum(4 * len(c) for i, c in self.columns.items() if i not in self.directions))
        self.budgeted = [i for i in op.inputs if i in self.directions and not self.contracts[i].lattice]
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
        self.noise = {}  # input: (the forward's own noise, relative, and the wider step it was differenced at)
        for i in op.inputs:
            at, noise = self._step_for_the_noise(i, step, base)
            if i in self.directions:
                self.jacobians[i] = self._directional(i, at, base, noise=noise)
                continue
            fine, coarse, smooth = self._jacobians(i, at, self.columns[i], base, noise=noise)
            on_device = smooth.to(fine.device)
            fine, coarse = fine[on_device], coarse[on_device]
            if self._too_noisy(fine, coarse) and not self.contracts[i].lattice:
                # One element's step moves a loss over many elements (a cross-entropy over 1025 classes, computed
                # in float32) by less than the loss's own rounding: a step of every element at once moves it
                # far more, and the directional derivative hears what the column could not.
                self.directions[i] = self._directions(i)
                self.jacobians[i] = self._directional(i, at, base, noise=noise)
                continue
            self.kinks[i] = int((~smooth).sum())
            self.columns[i] = self.columns[i][smooth]
            self.jacobians[i] = (fine, coarse)

    def _step_for_the_noise(self, i, step, center):
        """(the step, the noise allowed) for input i's columns: the dtype's step, and no noise beside its rounding,
        unless the forward's own noise (forward_noise) is more than NOISE_ABOVE_EPS of its dtype's epsilons of its
        outputs' size. A forward computed to a tolerance (a solver's, a bisection's grid) moves in steps far coarser
        than its dtype's, which a step made for the dtype reads as the slope (most columns rough, as at a kink, and
        the few that agree by chance wrong); then the step is widened as central differences want for that noise
        (STEP_SHARE times its cube root, relative, as the dtype's steps are for its epsilon), and the noise allowed
        in the two steps' agreement, which then sets the tolerance."""
        if self.contracts[i].lattice or not self.computed.is_floating_point:
            return step, 0.0
        largest = center.abs().nan_to_num(0.0).max().item() if center.numel() else 0.0
        noise = self.forward_noise(i, step, center)
        if not largest or noise <= NOISE_ABOVE_EPS * torch.finfo(self.computed).eps * largest:
            return step, 0.0
        wider = min(WIDEST_STEP, max(step, STEP_SHARE * (noise / largest) ** (1 / 3)))
        self.noise[i] = (noise / largest, wider)
        return wider, noise

    def forward_noise(self, i, step, center):
        """The forward's own noise in its outputs, absolute, from the op alone: the root mean square, over the
        outputs, of the fourth difference along a random direction of input i, over sqrt(70) (its gain on
        independent noise), at steps NOISE_LEVELS times apart from the dtype's step up. The fourth difference
        of a smooth forward is its rounding and its fourth derivative, which grows as the step's fourth power,
        and of kinks in some elements (a ReLU's) as its power 1.5; of a forward computed to a tolerance it is
        that tolerance's steps, which grow no faster than the square root of the step, as more elements cross
        one. The noise is the largest level that grows less than NOISE_GROWTH times by the next: 0 where none
        does, or the op refuses the moved values."""
        x = flat(self.values[i])  # on the input's device: a large input's direction is drawn where it lives
        finite = finite_elements(x)
        typical = finite.norm().item() / max(1, finite.numel()) ** 0.5 if finite.numel() else 1.0
        scale = torch.where(x.isfinite(), x.abs().clamp(min=typical or 1.0), torch.zeros_like(x))
        u = randn_flat(x.numel(), x.device, f"the forward's own noise {i}") * scale
        if self.contracts[i].projects:
            u = self.contracts[i].project(u.reshape(self.values[i].shape), self.values[i].detach().double())
            u = u.reshape(-1)
        if self.contracts[i].bounded:
            u = u * within_bounds(self.contracts[i], x.double(), u, 2 * step * NOISE_LEVELS ** 2)
        levels = []
        for level in range(3):
            h = step * NOISE_LEVELS ** level
            outputs = {}
            try:
                for k in (-2, -1, 1, 2):
                    moved = self._copies(self.dtype)
                    moved[i].add_((k * h * u).reshape(moved[i].shape).to(device=moved[i].device, dtype=moved[i].dtype))
                    outputs[k] = self._outputs(moved)
            except Exception:  # noqa: BLE001  (the op refuses the moved values: nothing measured)
                return 0.0
            fourth = outputs[-2] - 4 * outputs[-1] + 6 * center - 4 * outputs[1] + outputs[2]
            fourth = fourth.nan_to_num(0.0, 0.0, 0.0)
            levels.append(fourth.norm().item() / max(1, fourth.numel()) ** 0.5 / 70 ** 0.5)
        noisy = [here for here, above in zip(levels, levels[1:]) if above < NOISE_GROWTH * here]
        return max(noisy, default=0.0)

    @staticmethod
    def _too_noisy(fine, coarse, share=1.0):
        """Whether the columns' two steps disagree, under a random grad_output, by more than any tolerance
        could judge by (as expected() would measure them); or by more than share of that."""
        if not len(fine):
            return False
        g = randn_flat(fine.shape[1], fine.device, "finite-difference noise")
        return 8 * relative_error(coarse @ g, fine @ g) > NOISY * share

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
                else (v.detach().clone() if isinstance(v, torch.Tensor) else
                      tensors_afresh(v, dtype) if holds_tensors(v) else v) for v in self.values]

    def _outputs(self, values):
        return self._call(values)[0]

    def _call(self, values):
        """The op on values: (its outputs that carry a gradient, flat float64, one after another; what it picked:
        its integer and boolean outputs, an index, a permutation, a mask)."""
        with torch.no_grad():
            everything = flatten(seeded_call(self.op, values))
            outs = [everything[k] for k in self.graded]
        picked = [t for t in everything if not t.is_floating_point() and not t.is_complex()]
        if not outs:
            return torch.zeros(0, dtype=torch.float64, device="cpu"), picked
        return outputs_row(outs), picked

    def _either_side(self, i, move, before_call=None):
        """The outputs with input i moved either way, move(t, 1.0) and move(t, -1.0) in place: (up, down, crossed).
        before_call(plus, minus): shown input i moved either way, before the op can touch them.
        crossed: what the op picked (an integer output) differs from what it picks at the given values on
        either side, so the step crossed the boundary of a selection (a pivot, a top-k between tied values),
        where there is no derivative to difference; such a step is left out, as a kink is."""
        plus, minus = self._copies(self.dtype), self._copies(self.dtype)
        move(plus[i], 1.0)
        move(minus[i], -1.0)
        if before_call is not None:
            before_call(plus[i], minus[i])
        (up, up_picked), (down, down_picked) = self._call(plus), self._call(minus)
        return up, down, not (same_picks(up_picked, self.picked) and same_picks(down_picked, self.picked))

    def _within_contract(self, i, columns):
        """The columns of input i that finite differences step, given its contract: none on a lattice (a float
        that may be an index or a count is never stepped: see undifferenced), one of each mirrored pair of a
        symmetric matrix (its column is the pair, stepped together)."""
        contract = self.contracts[i]
        if contract.lattice:
            return columns[:0]
        if contract.symmetric:
            n = self.values[i].shape[-1]
            return columns[(columns // n) % n <= columns % n]
        return columns

    @property
    def undifferenced(self):
        """{input: its contract} for the inputs finite differences never step (on a lattice)."""
        return {i: c for i, c in self.contracts.items() if c.lattice}

    def _column(self, i, k):
        """Flat element k of input i as a direction, float64 and shaped like the input, projected onto its
        contract where that takes only part of a gradient (contracts.Contract.project): there the derivative
        along it is element k of the projected gradient, and the step keeps the input within the contract (a
        symmetric matrix moves both mirrored elements); None where the element moves alone."""
        contract = self.contracts[i]
        if not contract.projects:
            return None
        x = self.values[i].detach().double()
        e = torch.zeros(x.numel(), dtype=torch.float64, device=x.device)
        e[k] = 1.0
        return contract.project(e.reshape(x.shape), x)

    @staticmethod
    def _nudge(t, k, h):
        """t with its flat element k (in row-major order of its shape) moved by h, in place, whatever
        t's strides (reshape(-1) of a transposed tensor would be a copy, and the nudge lost)."""
        index = []
        for size in reversed(t.shape):
            index.append(k % size)
            k //= size
        t[tuple(reversed(index))] += h

    def _jacobians(self, i, step, columns, center, noise=0.0):
        """The Jacobian's rows for these columns of input i by central differences, at the step and at
        twice it; and which columns are smooth. On a smooth function the two central differences agree
        but for rounding, and the gap between the one-sided slopes doubles with the step. Across a kink
        neither holds: at ReLU's 0 the slopes either side are 1 and 0 at any step, their mean 0.5. noise: the
        forward's own noise in its outputs (forward_noise), allowed beside its dtype's rounding."""
        x = flat(self.values[i]).cpu()
        eps = torch.finfo(self.computed).eps if self.computed.is_floating_point else 0.0
        largest = center.abs().nan_to_num(0.0).max().item() if center.numel() else 0.0
        # The step follows each element's size, and never falls below the input's typical size (a step of
        # a thousandth of 1e-3 is not the step of a thousandth of 1); an infinite element (a -inf mask)
        # has no neighbourhood to difference, and is left out like a kink.
        finite = finite_elements(x)
        typical = finite.norm().item() / max(1, finite.numel()) ** 0.5 if finite.numel() else 1.0
        # A step stays inside the input's contract: along its column projected onto it, and short of a bound
        # (an element at one, 0 in a non-negative input, has no room on one side, and is left out like a kink).
        contract = self.contracts[i]
        scale, direction = {}, {}
        for k in columns.tolist():
            direction[k] = self._column(i, k)
            scale[k] = max(abs(x[k].item()), typical or 1.0)
            if contract.bounded and math.isfinite(x[k].item()):
                moved = torch.zeros_like(x) if direction[k] is None else direction[k].reshape(-1).cpu()
                moved[k] = 1.0 if direction[k] is None else moved[k]
                scale[k] *= within_bounds(contract, x, scale[k] * moved, step)
        rows, gaps, crossed = {1: [], 2: []}, {1: [], 2: []}, set()
        for k in columns.tolist():
            for factor in (1, 2):
                if not math.isfinite(x[k].item()) or scale[k] == 0.0:
                    rows[factor].append(torch.full_like(center, float("nan")))
                    gaps[factor].append(torch.full_like(center, float("nan")))
                    continue
                h = factor * step * scale[k]
                if direction[k] is None:
                    def move(t, sign, k=k, h=h):  # this column's k and h, bound now (called before the next)
                        self._nudge(t, k, sign * h)
                else:
                    def move(t, sign, k=k, h=h):
                        t.add_((sign * h * direction[k]).to(device=t.device, dtype=t.dtype))
                up, down, crossing = self._either_side(i, move)
                if crossing:
                    crossed.add(k)
                rows[factor].append((up - down) / (2 * h))
                gaps[factor].append((up - 2 * center + down) / h)  # right slope minus left slope
        if not columns.numel():
            empty = torch.zeros(0, center.numel(), dtype=torch.float64, device=center.device)
            return empty, empty, torch.zeros(0, dtype=torch.bool, device="cpu")
        fine, coarse = torch.stack(rows[1]), torch.stack(rows[2])
        gap_fine, gap_coarse = torch.stack(gaps[1]), torch.stack(gaps[2])
        steps = torch.tensor([step * (scale[k] or 1.0) for k in columns.tolist()],
                             dtype=torch.float64, device=fine.device)
        # Rounding moves a one-sided slope by about eps * |output| / step; a thousandth of the steepest
        # slope is far more than curvature changes a central difference over one step.
        allowed = 1e-3 * fine.abs().nan_to_num(0.0).max().item() + 8 * (eps * largest + noise) / steps
        central = (coarse - fine).abs().nan_to_num(0.0).amax(dim=1)
        doubling = (gap_coarse - 2 * gap_fine).abs().nan_to_num(0.0).amax(dim=1)
        steppable = torch.tensor([scale[k] > 0 and k not in crossed for k in columns.tolist()], dtype=torch.bool,
                                 device="cpu")
        smooth = ((central <= allowed) & (doubling <= allowed)).cpu() & x[columns].isfinite() & steppable
        return fine, coarse, smooth

    @property
    def along_directions(self):
        return bool(self.directions)

    def direction_count(self):
        """How many random directions each input went along, after those at a kink were left out: '12', '10 to 12'."""
        kept = sorted({len(d.labels) for d in self.directions.values()})
        return f"{kept[0]} to {kept[-1]}" if len(kept) > 1 else f"{kept[0]}"

    def _directions(self, i):
        """Random directions for input i, each element moved in proportion to its own size (never below the
        input's typical size), drawn one at a time on the input's device when asked for, never held all at
        once: twelve directions of a large input are more memory than the input. An element that is
        exactly 0 (a ReLU's kink, a padded zero) or not finite stays where it is, so no direction crosses a
        kink there. An input on a lattice gets none (see undifferenced)."""
        x = flat(self.values[i].detach())
        n = x.numel()
        finite = finite_elements(x)
        typical = (finite.norm().item() / max(1, finite.numel()) ** 0.5) or 1.0
        scale = torch.where(x.isfinite() & (x != 0), x.abs().clamp(min=typical), torch.zeros_like(x))
        tail = n - n % BLOCK if n % BLOCK else max(0, n - BLOCK)
        spans = {"every element": (0, n), "the first block": (0, min(n, BLOCK)), "the last block": (tail, n)}
        plan = []
        for label, count in self.direction_counts.items() if not self.contracts[i].lattice else ():
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

    def _directional(self, i, step, center, noise=0.0):
        """Directional derivatives of input i along its directions, at the step and twice it: (fine, coarse)
        rows (one a direction, over the outputs), less the directions whose steps straddle a kink."""
        directions = self.directions[i]
        directions.bound(step)
        if not directions.plan:
            directions.keep([], step)
            empty = torch.zeros(0, center.numel(), dtype=torch.float64, device=center.device)
            return empty, empty
        eps = torch.finfo(self.computed).eps if self.computed.is_floating_point else 0.0
        largest = center.abs().nan_to_num(0.0).max().item() if center.numel() else 0.0
        # Each direction's verdict needs only its row's largest differences, so the second differences are taken
        # row by row and never stacked (elementwise, the same numbers as stacked); and the directions as the op
        # saw them are made while each is in hand, where they are to be held, not drawn again for keep.
        holding = len(directions.plan) * directions.scale.numel() <= KEPT_ELEMENTS
        # Every difference below is the same arithmetic, in the same order, as written out plainly ((up - down) / 2h,
        # (up - 2 center + down) / h), done in place: on a large input each new tensor is a fresh allocation.
        twice_center = 2 * center
        rows, seen, central, doubling, steepest, moved, crossed = {1: [], 2: []}, {}, [], [], 0.0, [], []
        for k in range(len(directions.plan)):
            u = directions.unit(k)
            crossing, gaps = False, {}
            for factor in (1, 2):
                h = factor * step
                made = {}  # the shift, made once for both sides: -(h u) is h u negated exactly, x - h u as ever

                def move(t, sign, h=h, u=u, made=made):  # this direction's, bound now (called before the next)
                    if not made:
                        made["shift"] = (h * u).reshape(t.shape).to(device=t.device, dtype=t.dtype)
                    if sign > 0:
                        t.add_(made["shift"])
                    else:
                        t.sub_(made["shift"])

                def the_direction_seen(plus, minus, h=h, k=k):  # as moved(): what the op saw of u, at the step
                    seen[k] = (flat(plus) - flat(minus)).div_(2 * h)
                held = holding and factor == 1
                up, down, crossed_here = self._either_side(i, move, the_direction_seen if held else None)
                crossing |= crossed_here
                gap = up - twice_center
                gaps[factor] = gap.add_(down).div_(h)
                rows[factor].append(up.sub_(down).div_(2 * h))
                del up, down, made
            fine_row, coarse_row = rows[1][-1], rows[2][-1]
            if fine_row.numel():
                steepest = max(steepest, fine_row.abs().nan_to_num_(0.0).max().item())
                central.append((coarse_row - fine_row).abs_().nan_to_num_(0.0).amax())
                doubling.append(gaps[2].sub_(gaps[1], alpha=2).abs_().nan_to_num_(0.0).amax())
            else:
                central.append(None)
                doubling.append(None)
            moved.append(bool(fine_row.any()) or bool(coarse_row.any()))  # a NaN moved, as != 0 says
            crossed.append(crossing)
            del u, gaps
        allowed = 1e-3 * steepest + 8 * (eps * largest + noise) / step
        # A direction along which no output moved at either step says nothing of a derivative below the op's
        # resolution (a float32 loss of a large input, a block of ignored rows): it is left out, as a kink is.
        smooth = [m and not c and (a is None or (bool(a <= allowed) and bool(b <= allowed)))
                  for a, b, m, c in zip(central, doubling, moved, crossed)]
        self.kinks[i] = sum(1 for keep in smooth if not keep)
        kept = [k for k, keep in enumerate(smooth) if keep]
        directions.keep(kept, step, seen)
        if not kept:
            empty = torch.zeros(0, center.numel(), dtype=torch.float64, device=center.device)
            return empty, empty
        return torch.stack([rows[1][k] for k in kept]), torch.stack([rows[2][k] for k in kept])

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

    def bound(self, step):
        """Each element's size in the directions capped so that a step (at twice step) stays short of the
        contract's bounds (0 in a non-negative input: an element at a bound stays where it is)."""
        contract = self.differences.contracts[self.i]
        x = flat(self.differences.values[self.i].detach()).to(self.scale.device)
        self.scale = torch.minimum(self.scale, contract.boundaries(x) / (4 * step))
        self.step = step

    def unit(self, k):
        """Direction k, flat: random, each element in proportion to its scale, within its span; projected onto the
        input's contract where that takes only part of a gradient (a symmetric direction for a symmetric
        matrix), and shortened where the projection moved an element at a bound."""
        _, start, stop, name = self.plan[k]
        z = randn_flat(self.scale.numel(), self.scale.device, name)
        z[:start] = 0.0
        z[stop:] = 0.0
        u = z * self.scale
        contract = self.differences.contracts[self.i]
        if not contract.projects:
            return u
        x = self.differences.values[self.i].detach().double().to(u.device)
        u = contract.project(u.reshape(x.shape), x).reshape(-1)
        return u * within_bounds(contract, flat(x), u, self.step) if contract.bounded else u

    def keep(self, kept, step, seen=None):
        """The directions kept, at step; seen: those already made as the op saw them, at that step."""
        self.kept, self.step = kept, step
        self._seen = {}
        if len(kept) * self.scale.numel() <= KEPT_ELEMENTS:
            seen = seen or {}
            self._seen = {k: seen[k] if k in seen else self.seen(k) for k in kept}  # (built whole, then held)

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

    def __init__(self, op, values, reference, graded, sample=False, directions=None):
        self.op, self.values = op, values
        self.base = [dtype_tolerance(v) for v in values]
        self.contracts = {i: found(values[i]) for i in op.inputs}
        self.source = (Reference(op, values, reference) if reference is not None else
                       FiniteDifferences(op, values, graded, sample=sample, contracts=self.contracts,
                                         directions=directions))

    @property
    def by_reference(self):
        return isinstance(self.source, Reference)

    def describe(self, on_slice=None):
        """Which truth judged the gradients, for the report's last line; on_slice: the Truth of a slice of these
        values, where one judged a random grad_output again along directions of its own."""
        if self.by_reference:
            return "the reference, in float64" if self.source.dtype == torch.float64 else "the reference"
        if self.source.along_directions:
            count = self.source.direction_count()
            if count == "0":
                return "finite differences along random directions, none of which a derivative could be read along"
            also = ""
            if on_slice is not None and not on_slice.by_reference and on_slice.source.along_directions:
                also = f" on the whole and {on_slice.source.direction_count()} on the slice"
            stepped = [i for i in self.op.inputs if i not in self.source.directions]
            if not stepped:
                return (f"finite differences along {count} random directions of each input{also} (too many elements "
                        f"to step one by one)")
            along = ", ".join(f"`{self.op.slots[i].name}`" for i in self.op.inputs if i in self.source.directions)
            return (f"finite differences along {count} random directions of {along}{also} (too many elements to step "
                    f"one by one), element by element elsewhere")
        noisy = [f"{noise:.2g} (relative)" for noise, _ in self.source.noise.values()]
        if noisy:
            return (f"finite differences, stepped wider where the forward moves in steps of its own (its noise "
                    f"{', '.join(noisy)}: a solver's or a bisection's tolerance), and held to what they agree by there")
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
        expected = self.source.expected([g.detach().contiguous() for g in grad_outputs], list(self.base))
        for i, contract in self.contracts.items():
            expected.projected[i] = projection(contract, self.values[i])
            if expected.projected[i] is not None and expected.indices[i] is None:
                expected.grads[i] = flat(expected.projected[i](expected.grads[i].reshape(self.values[i].shape)))
        return expected

    @property
    def undifferenced(self):
        """{input: its contract} for the inputs finite differences never step; none with a reference."""
        return {} if self.by_reference else self.source.undifferenced

    def tf32_error(self, grad_outputs, i):
        """How far TF32-rounded operands alone move input i's right gradient (relative); 0 where unknown."""
        if not self.by_reference:
            return 0.0
        return self.source.tf32_error([g.detach().contiguous() for g in grad_outputs], i)
