"""What every check reads: the op, one set of argument values, the right gradient, and the op's
calls made safely. A check asks the context for calls and numbers, and returns outcomes; it never
writes into the context or the report.

Every call of the op goes through run() or vjp(), on fresh copies of the values, so no check can
spoil another's inputs. Where the op raises, they raise OpRaised, which says what was being done,
and which trap a raise there means (the runner turns it into a finding, or into a note where the
values were the checker's own idea, which an op may refuse loudly).
"""
import functools
import math

import torch

from ..calling import (OutOfMemory, UsageError, announce, carries_gradient, clip, forward, out_of_memory,
                       seeded_grad)
from ..report import CRASHES, REFUSED_FROZEN, RETURNS_WRONG, Finding, Note
from ..strategies import describe_shapes, input_layouts_for, randn
from ..contracts import finite_elements
from .truth import (FORWARD_WRONG, NOISY, SETTLED_ULPS, TOLERANCE, Later, Truth, extent, flat, narrowest,
                    relative_error)

# autograd's own words when it refuses what a backward returned
RETURNED_WRONG_WORDS = ("incorrect number of gradients", "returned an invalid gradient",
                        "returned a gradient different than None", "expected Variable or None")


DIFFERENCED = "differenced for the right gradient"
# Units in the last place of the op's precision that rounding may leave in a gradient, relative to its
# largest element: a sum of a few thousand terms in any order stays well inside it (on an H200, two layouts'
# float64 sums of a batch-norm bias gradient, exactly 0 in exact arithmetic, came out more than 1024 apart).
ROUNDING_ULPS = 4096
# The grad_outputs the op's own noise is measured with (Context.own_noise): a, b and c, then a + b and b + c.
NOISE_STREAMS = ("own noise a", "own noise b", "own noise c")


# CUDA's words for a fault that leaves the process's GPU context unusable: every later call fails with it.
FAULT_WORDS = ("illegal memory access", "unspecified launch failure", "device-side assert", "misaligned address",
               "illegal instruction", "hardware stack error", "ILLEGAL_ADDRESS", "LAUNCH_FAILED")


class OpFaulted(Exception):
    """The op faulted the GPU where the checker called it (what says where): no check may take that for a
    finding of its own, since the context is lost for every call after it; the runner words it."""

    def __init__(self, what, error):
        super().__init__(what)
        self.what, self.error = what, error

    @property
    def message(self):
        return clip(f"{type(self.error).__name__}: {self.error}")


def faulted(error):
    return any(word in str(error) for word in FAULT_WORDS)


def reraise_fault(what, error):
    """Raises OpFaulted where error is a fault that loses the GPU context, OutOfMemory where it found no room: a check
    that catches the op's raise to judge it (a refusal is legal, say) must never take either for one."""
    if faulted(error):
        raise OpFaulted(what, error) from error
    if out_of_memory(error):
        raise OutOfMemory(what, error) from error


def raised(what, error, made_up=False, frozen=()):
    """The exception for the op's raise at what: OpFaulted for a fault that loses the GPU context, OutOfMemory for an
    allocation that found no room, else OpRaised."""
    if faulted(error):
        return OpFaulted(what, error)
    if out_of_memory(error):
        return OutOfMemory(what, error)
    return OpRaised(what, error, made_up=made_up, frozen=frozen)


class OpRaised(Exception):
    """The op raised where the checker called it. made_up: on values the checker made up (grown,
    transposed, other values), which an op may refuse loudly. frozen: the inputs the checker froze there
    that no caller passes frozen (not in frozen_by_callers), which an op may refuse too. trap: what a raise
    there means (a crash, or a wrong gradient returned where autograd's own words say so)."""

    def __init__(self, what, error, trap=CRASHES, made_up=False, frozen=()):
        super().__init__(what)
        self.what, self.error, self.made_up, self.frozen = what, error, made_up, tuple(frozen)
        message = str(error)
        self.trap = RETURNS_WRONG if any(w in message for w in RETURNED_WRONG_WORDS) else trap

    @property
    def message(self):
        return clip(f"{type(self.error).__name__}: {self.error}")


def computed_precision(tensors, inputs=()):
    """The narrowest floating-point dtype whose numbers every output is exactly (float32 outputs of a
    kernel that computes in bfloat16 are all bfloat16 numbers); see truth.narrowest."""
    return narrowest(torch.cat([flat(t) for t in tensors]) if tensors else None,
                     max((t.dtype for t in tensors), key=lambda d: d.itemsize, default=torch.float32),
                     list(inputs))


class Context:
    """One set of argument values ("given", or "grown" past several blocks) of one op."""

    def __init__(self, op, values, label, reference, given=None, earlier=(), options=None):
        self.op, self.values, self.label, self.reference = op, values, label, reference
        self.options = dict(options or {})  # check_backward's options (second_order, compile)
        self.given = given             # the given inputs' context, where these are grown
        self.earlier = tuple(earlier)  # what the checks found on the given inputs, where these are grown
        self.base = {"given": 0, "grown": 1}.get(label, 2)  # each set of inputs draws from streams of its own
        # True appended each time a backward of the op drew from torch's generators (seeded alike every call)
        self.drew = []
        self._typical, self._typical_extents = {}, {}  # by input: see typical() and typical_extent()
        self._last_drawn = (None, [])  # (stream name, its grad_outputs): see randoms()
        # finite differences' directions by span (truth.DIRECTIONS where None): fewer on a whole whose other checks
        # are made on a slice (runner.run_checks)
        self.directions = None
        first = self.run("the forward")
        self.first = first
        self.outputs = [o.detach() for o in first.graded]
        self.computed = computed_precision(self.outputs, [values[i] for i in op.inputs])

    # -- naming ------------------------------------------------------------------------------

    @property
    def grown(self):
        return self.label == "grown"

    def where(self):
        if self.grown:
            return f" (on inputs grown to {describe_shapes(self.values)})"
        if self.label == "sliced":  # the given values' first rows: the caller's own values, a part of them
            return f" (on a slice of the inputs, {describe_shapes(self.values)})"
        return ""

    def name(self, i):
        """'input `x`: ' where the op has several inputs, else ''."""
        return f"input `{self.op.slots[i].name}`: " if len(self.op.inputs) > 1 else ""

    def arg(self, i):
        return f"`{self.op.slots[i].name}`"

    def finding(self, check, trap, evidence, i=None, then="", *, subject=True, input=None, error=None):
        """A check's finding, worded as every check words one (the one place its sentence is built): the input it
        is about ('input `x`: ' where the op has several, unless the evidence names it itself, subject=False), the
        evidence, the grown shapes it was seen on, and what follows from it (then). input: the input whose gradient
        shows it, where that is not i (the report lists the same trap's evidence once for each)."""
        who = self.name(i) if subject and i is not None else ""
        if input is None and i is not None:
            input = self.arg(i)
        return Finding(check, trap, f"{who}{evidence}{self.where()}{then}", input=input, error=error)

    def frozen_by_checker(self, frozen):
        """Those of the frozen inputs that no caller passes frozen: a variation only the checker makes."""
        return [i for i in frozen if i not in self.op.frozen_by_callers]

    def refusal_of_frozen(self, check, raised):
        """The note for the op's refusal of inputs the checker froze and no caller freezes (legal: the op's
        callers never make that call); re-raises any other raise, for the runner to word."""
        if not raised.frozen:
            raise raised
        which = ", ".join(self.arg(i) for i in raised.frozen)
        return Note(check, f"refuses {which} frozen (requires_grad=False), which no caller does ({raised.message}); "
                           f"if a caller does, name it in frozen_by_callers, and the refusal is a crash",
                    REFUSED_FROZEN)

    # -- random draws, each from its own named stream ----------------------------------------

    def draw(self, name, like):
        return randn(like.shape, like, name, self.base)

    def randoms(self, name):
        """A random grad_output for each output that carries a gradient, from stream name: fresh tensors each time.
        On the CPU the last stream drawn is kept, and asked for again (a check's loop over layouts or frozen inputs)
        it is copied, not drawn again: there a draw costs twenty to fifty times a copy. On a GPU a draw is one kernel,
        as a copy is, and a kept one would hold device memory a large op needs."""
        if self._last_drawn[0] == name:
            return [t.clone() for t in self._last_drawn[1]]
        drawn = [randn(o.shape, o, f"{name} {k}", self.base) for k, o in enumerate(self.outputs)]
        if all(t.device.type == "cpu" for t in drawn):
            self._last_drawn = (name, [t.clone() for t in drawn])
        return drawn

    # -- calls of the op ---------------------------------------------------------------------

    def run(self, what, values=None, frozen=(), made_up=False):
        """The forward on fresh copies of values (these, by default). On grown inputs every call is on values
        the checker made up."""
        announce(what + self.where())
        try:
            return forward(self.op, frozen=frozen, values=self.values if values is None else values)
        except Exception as error:  # the op's own failure: the runner words it
            raise raised(what, error, made_up=made_up or self.grown, frozen=self.frozen_by_checker(frozen)) from error

    def grads(self, run, grad_outputs, what, made_up=False, retain_graph=False, only=None, raw=False):
        """The gradients of run's outputs under grad_outputs (one for each output that carries a gradient
        with every input wanting one, in order), each copied as it comes back (raw=False), so a backward
        that hands back a workspace it reuses cannot change them at its next call."""
        announce(what + self.where())
        try:
            grads = run.grad(grad_outputs, retain_graph=retain_graph, only=only, positions=self.graded_positions,
                             drew=self.drew)
        except Exception as error:
            frozen = self.frozen_by_checker(i for i in self.op.inputs if run.leaves[i] is None)
            raise raised(what, error, made_up=made_up or self.grown, frozen=frozen) from error
        return grads if raw else copies(grads)

    def vjp(self, grad_outputs, what, values=None, frozen=(), made_up=False, fresh=True, raw=False):
        """The op's gradients under grad_outputs, for every argument (None where it takes none). They are
        copied first (fresh=True), so a backward that writes into its grad_output spoils nothing else."""
        if fresh:
            grad_outputs = [g.clone() for g in grad_outputs]
        run = self.run(what, values=values, frozen=frozen, made_up=made_up)
        return self.grads(run, grad_outputs, what, made_up=made_up, raw=raw)

    def grad_of(self, loss, leaves, what):
        """autograd.grad of a loss the check built around the op, for each of leaves (None where none)."""
        wanted = [x for x in leaves if x is not None]
        announce(what + self.where())
        try:
            grads = iter(seeded_grad(loss, wanted, allow_unused=True, drew=self.drew))
        except Exception as error:
            raise raised(what, error, made_up=self.grown) from error
        return copies([next(grads) if x is not None else None for x in leaves])

    # -- the right gradient ------------------------------------------------------------------

    @property
    def truth(self):
        """The right gradient at these values, its tolerance widened to the precision the op's forward
        achieves against the reference (a kernel that computes in TF32 is held to its own precision).
        Raises UsageError for a broken reference or finite differences past their budget, OpRaised
        where the op refuses the nudged values finite differences need (each time it is asked)."""
        if "_truth" not in self.__dict__:
            try:
                truth = Truth(self.op, self.values, self.reference, self.graded_positions, sample=self.grown,
                              directions=self.directions)
                error = truth.forward_error(self.first.graded)
                if error is not None and error <= FORWARD_WRONG:
                    truth.calibrate(error)
                self._truth = truth
            except (OpRaised, OutOfMemory, UsageError) as error:
                self._truth = error
            except Exception as error:  # noqa: BLE001  (finite differences call the op on nudged values)
                self._truth = raised(DIFFERENCED, error, made_up=True)
        if isinstance(self._truth, Exception):
            raise self._truth
        return self._truth

    @functools.cached_property
    def graded_positions(self):
        return [k for k, t in enumerate(self.first.outputs) if carries_gradient(t)]

    @property
    def forward_error(self):
        """The forward's distance from the reference (relative), None without one."""
        return self.truth.forward_error(self.first.graded)

    @property
    def forward_right(self):
        """False where the forward disagrees with the reference: then its gradients cannot be judged
        against the reference's."""
        error = self.forward_error
        return error is None or error <= FORWARD_WRONG

    def expected(self, grad_outputs):
        """The right gradients under grad_outputs, judged beside the op's own noise (own_noise) at their size,
        where the truth is the reference's (finite differences carry a noise of their own, larger)."""
        expected = self.truth.expected(grad_outputs)
        dtypes = [v.dtype if isinstance(v, torch.Tensor) else None for v in self.values]
        if not self.truth.by_reference:
            return expected.judged_with(None, None, dtypes)
        size = grad_output_size(grad_outputs)
        # Measured only where a comparison needs it (truth.Later): it only widens what is allowed, so a gradient
        # right without it is right with it, and a right op's check never makes its six calls.
        inputs = range(len(self.values))
        noise = Later(lambda: [self.own_noise[i][0] * size if i in self.own_noise else None for i in inputs])
        settled = Later(lambda: [self.own_noise[i][1] if i in self.own_noise else None for i in inputs])
        return expected.judged_with(noise, settled, dtypes)

    @functools.cached_property
    def own_noise(self):
        """{input: (noise, settled)}: the op's own noise in each element of its gradient under a standard normal
        grad_output, measured from the op alone, as the larger of what two answers that must agree differ by:
        its departure from linearity in grad_output, |B(a + b) - B(a) - B(b)| and |B(b + c) - B(b) - B(c)|
        (autograd's vector-Jacobian product is linear in grad_output: what is left is rounding), and its
        answer for a laid out otherwise against the one for a. A measure more than NOISY of the gradient's size
        is no rounding (a backward that ignores grad_output is not linear in it, one that misreads a layout
        disagrees with itself), and is left out. settled: the elements whose noise is within SETTLED_ULPS ulps
        (of the input's dtype) of the op's own gradient there, which is a normal number of that dtype (an
        answer of exactly 0 every time measures nothing, and one of a few float16 steps of 6e-8, whose
        rounding is a whole step, could agree with itself by chance). Empty where the op refuses these calls."""
        a, b, c = (self.randoms(name) for name in NOISE_STREAMS)
        calls = {"a": a, "b": b, "c": c, "a + b": summed(a, b), "b + c": summed(b, c)}
        try:
            got = {key: self.vjp(g, f"with grad_output {key} (the op's own noise)") for key, g in calls.items()}
        except (OpRaised, OutOfMemory):
            return {}
        try:
            laid = self.vjp([laid_out_otherwise(t) for t in a], "with grad_output a laid out otherwise (the op's "
                                                                 "own noise)")
        except (OpRaised, OutOfMemory):
            laid = [None] * len(self.values)
        noise = {}
        for i in self.op.inputs:
            answers = {key: flat(got[key][i]) for key in calls}
            if any(t is None or t.shape != answers["a"].shape for t in answers.values()):
                continue
            sources = [answers["a + b"] - answers["a"] - answers["b"], answers["b + c"] - answers["b"] - answers["c"]]
            if laid[i] is not None and flat(laid[i]).shape == answers["a"].shape:
                sources.append(flat(laid[i]) - answers["a"])
            value = torch.stack([t.abs() for t in answers.values()]).nan_to_num(0.0, 0.0, 0.0).amax(dim=0)
            size = value.norm().item()
            kept = [t.abs().nan_to_num(0.0, 0.0, 0.0) for t in sources]
            kept = [t for t in kept if t.norm().item() <= NOISY * size]
            if not kept:
                continue
            measured = torch.stack(kept).amax(dim=0)
            info = torch.finfo(self.values[i].dtype)
            # below the smallest normal number rounding is a whole step, not a share of the value
            noise[i] = (measured, (value >= info.tiny) & (measured <= SETTLED_ULPS * info.eps * value))
        return noise

    def noisy(self, expected, inputs=None):
        """The inputs whose right gradient is too loose to judge by: finite differences too noisy, or a
        reference the forward is so far from that its gradients are held to more than NOISY."""
        return [i for i in (self.op.inputs if inputs is None else inputs) if expected.tolerance[i] > NOISY]

    def why_loose(self, expected, i):
        """Why input i's right gradient is too loose to judge by, for an Undecided line."""
        if i in self.truth.undifferenced:
            return (f"{self.arg(i)} holds only {self.truth.undifferenced[i].lattice_words}: a float on a lattice may "
                    f"be an index or a count, which no step may move, so finite differences leave it alone"
                    f"{self.where()}: pass a reference (or name it in no_grad, if it takes no gradient)")
        if self.truth.by_reference:
            return (f"the forward is {self.forward_error:.3g} (relative) off the reference{self.where()}, so its "
                    f"gradients are held only to {expected.tolerance[i]:.2g}, too loose to judge")
        if math.isinf(expected.tolerance[i]):
            return (f"finite differences for {self.arg(i)} have nothing to judge by: every element or direction they "
                    f"stepped straddles a kink or moves no output{self.where()}: pass a reference")
        return (f"finite differences for {self.arg(i)} disagree with themselves by {expected.tolerance[i]:.2g} "
                f"(relative) between two steps, too noisy to decide{self.where()}: pass a reference")

    def errors(self, got, expected, inputs=None):
        """{input: error in tolerances} for the inputs whose gradient is wrong, less the noisy ones."""
        inputs = [i for i in (self.op.inputs if inputs is None else inputs) if i not in self.noisy(expected, inputs)]
        errors = {i: expected.error(got[i], i, self.values[i].shape) for i in inputs}
        return {i: e for i, e in errors.items() if e > 1.0}

    # -- the op against itself ---------------------------------------------------------------

    @functools.cached_property
    def repeat_grad_outputs(self):
        return self.randoms("the same call twice")

    @functools.cached_property
    def repeat(self):
        """The same call made twice, on fresh copies: (first gradients, second gradients), each cloned
        as it comes back (a backward may hand back a workspace it reuses). The two calls' forward outputs are
        held in repeat_outputs until the same-call check takes them (take_repeat_outputs)."""
        g = self.repeat_grad_outputs
        grads, outputs = [], []
        for what in ("with a random grad_output", "called again"):
            run = self.run(what)
            outputs.append([o.detach() for o in run.graded])
            grads.append(self.grads(run, [t.clone() for t in g], what))
        self._repeat_outputs = tuple(outputs)
        return tuple(grads)

    def take_repeat_outputs(self):
        """The forward outputs of the two calls of repeat, handed over once (then let go of: a large op's outputs)."""
        self.repeat  # noqa: B018  (made here, where nothing asked for it yet)
        outputs, self._repeat_outputs = self._repeat_outputs, None
        return outputs

    def typical(self, i):
        """Input i's gradient under a random grad_output, the op's or the right one, whichever is larger: the
        floor for comparing two of the op's own gradients where one is exactly 0 (a masked region, a
        grad_output constant along a reduction), or both are rounding (a backward that ignores grad_output
        returns a normaliser's gradient for grad_output = 1, which is 0 but for rounding). The same tensor for
        every comparison of the context's (its norm and largest element: typical_extent)."""
        if i not in self._typical:
            self._typical[i] = self._typical_of(i)
        return self._typical[i]

    def typical_extent(self, i):
        """(norm, largest element) of typical(i), as relative_error takes it: measured once, not per comparison."""
        if i not in self._typical_extents:
            t = self.typical(i)
            self._typical_extents[i] = None if t is None else extent(t)
        return self._typical_extents[i]

    def _typical_of(self, i):
        first = self.repeat[0][i]
        own = None if first is None else flat(first).nan_to_num(0.0, 0.0, 0.0)
        right = self.right_under_repeat[i]
        if own is None or (right is not None and right.norm().item() > own.norm().item()):
            return right
        return own

    @functools.cached_property
    def right_under_repeat(self):
        """The right gradient of each argument under the same-call-twice grad_output, flat and finite, where a
        truth knows every element of it (None elsewhere)."""
        try:
            expected = self.expected(self.repeat_grad_outputs)
        except (OpRaised, OutOfMemory, UsageError):
            return [None] * len(self.values)
        return [g.nan_to_num(0.0, 0.0, 0.0) if g is not None and index is None else None
                for g, index in zip(expected.grads, expected.indices)]

    @functools.cached_property
    def rounding_floor(self):
        """What rounding alone can leave in any element of the op's gradients, a difference two of the op's
        own answers may have for nothing: ROUNDING_ULPS of the precision it computes in, times the largest
        gradient element under a random grad_output (the op's or the right one). A gradient that is zero in
        exact arithmetic (a bias before a batch norm) is rounding alone, and two sums of it in different
        orders (atomic adds) differ by that much, however far apart relative to each other. In a narrow dtype,
        at most its tolerance of that largest element."""
        typical = [self.typical(i) for i in self.op.inputs]
        largest = max((t.abs().max().item() for t in typical if t is not None and t.numel()), default=0.0)
        # never more than the dtype's own tolerance of it: 4096 ulps of float16 are 4 times the largest element
        return min(ROUNDING_ULPS * torch.finfo(self.computed).eps, TOLERANCE.get(self.computed, 1e-4)) * largest

    def noise(self, i):
        """How far the same call made twice lands from itself (relative): 0 for a deterministic op."""
        first, second = self.repeat
        if first[i] is None or second[i] is None or first[i].shape != second[i].shape:
            return 0.0
        return relative_error(flat(second[i]), flat(first[i]), typical=self.typical_extent(i),
                              allowance=self.rounding_floor)

    def tolerance(self, i):
        """How far two of the op's own gradients may differ: the dtype's tolerance (the precision the
        kernel computes in, where that is narrower), widened to the op's own run-to-run noise."""
        base = max(TOLERANCE.get(self.values[i].dtype, 1e-4), 4 * TOLERANCE.get(self.computed, 0.0))
        return max(base, 8 * self.noise(i))

    def output_tolerance(self):
        """How far two of the op's own forwards may differ, relative: their dtype's tolerance, or that of
        the precision the kernel computes in, where that is narrower."""
        return max(max(TOLERANCE.get(o.dtype, 1e-4) for o in self.outputs), 4 * TOLERANCE.get(self.computed, 0.0))

    def same(self, a, b, inputs=None):
        """{input: relative difference} for the inputs whose gradients differ between two of the op's own
        answers beyond the op's own tolerance."""
        differ = {}
        for i in self.op.inputs if inputs is None else inputs:
            if (a[i] is None) != (b[i] is None):  # None is zeros to autograd: legal where the other is 0
                other = a[i] if b[i] is None else b[i]
                if bool(flat(other).abs().nan_to_num(1.0).max() > self.rounding_floor):
                    differ[i] = float("inf")
            elif a[i] is not None:
                if a[i].shape != b[i].shape:
                    differ[i] = float("inf")
                    continue
                error = relative_error(flat(a[i]), flat(b[i]), typical=self.typical_extent(i),
                                       allowance=self.rounding_floor)
                if error > self.tolerance(i):
                    differ[i] = error
        return differ


def summed(a, b):
    return [x + y for x, y in zip(a, b)]


def grad_output_size(grad_outputs):
    """How large grad_outputs are beside standard normal ones: the largest root-mean-square of any of them."""
    sizes = [finite_elements(flat(g)) for g in grad_outputs]
    return max((t.norm().item() / t.numel() ** 0.5 for t in sizes if t.numel()), default=0.0)


def laid_out_otherwise(t):
    """The same values as t laid out otherwise (transposed, or a padded view whose gaps hold NaN), where t has
    another layout; else t."""
    layouts = input_layouts_for(t)
    return layouts[0][1] if layouts else t


def copies(tensors):
    return [None if t is None else t.detach().clone() for t in tensors]


def largest_change(before, after):
    """0.0 where after holds what before held (NaN where NaN was, so a -inf mask or a NaN is no change);
    else the largest change (inf where an infinity or a NaN came or went)."""
    if before.shape != after.shape or before.dtype != after.dtype:
        return float("inf")
    if not before.is_floating_point():
        return float((after != before).sum().item())
    if torch.equal(after, before):  # one pass, the usual answer (False beside a NaN: then element by element)
        return 0.0
    unchanged = (after == before) | (after.isnan() & before.isnan())
    if bool(unchanged.all()):
        return 0.0
    changed = (after.double() - before.double())[~unchanged].abs()
    return changed.nan_to_num(nan=float("inf")).max().item()


def frozen_sets(context):
    """Every input wanting a gradient, then (where there are several) each frozen in turn: never one a function
    argument reads (its callers pass the very tensor the function reads, wanting a gradient)."""
    inputs = context.op.inputs
    frozen = [(i,) for i in context.op.varied]
    return [()] + frozen if len(inputs) > 1 else [()] + frozen[:1]
