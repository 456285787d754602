"""The checks, one a trap: the op called the ways autograd really calls it.

Each set of inputs (the ones given, then the same grown past several blocks) goes through:
  1. the forward, on fresh copies: does it write into an input? (then: who gets hurt)
  2. the same call twice, and two calls in one graph: does the backward keep state?
  3. a random grad_output against the right gradient, per input; a wrong one is diagnosed;
  4. grad_output, the inputs and the outputs after the backward: did it write into any?
  5. the layouts autograd hands on, against the same values made contiguous;
  6. a transposed input; 7. fan-in; 8. each input frozen in turn, and backward called directly.
Checks that judge the op against itself (2, 4, 5, 6) need no reference: they hold even where
finite differences cannot decide.
"""
import torch

from . import layouts
from .backend import TRITON_IMPORTED_FIRST
from .calling import (UsageError, carries_gradient, clip, differentiable, flatten, forward, is_function,
                      seeded_call)
from .layouts import random_like, uniform_like
from .truth import NOISY, TOLERANCE, Truth, relative_error


def largest_change(before, after):
    """0.0 where after holds what before held (NaN where NaN was, so a -inf mask or a NaN is no change);
    else the largest change (inf where an infinity or a NaN came or went)."""
    if before.shape != after.shape or before.dtype != after.dtype:
        return float("inf")
    if not before.is_floating_point():
        return float((after != before).sum().item())
    unchanged = (after == before) | (after.isnan() & before.isnan())
    if bool(unchanged.all()):
        return 0.0
    changed = (after.double() - before.double())[~unchanged].abs()
    return changed.nan_to_num(nan=float("inf")).max().item()


class Battery:
    """Every check, at one set of argument values, writing into one report."""

    def __init__(self, op, values, reference, report, label, known_wrong=(), reference_agreed=False):
        self.op, self.values, self.reference, self.report, self.label = op, values, reference, report, label
        self.known_wrong = set(known_wrong)   # inputs already found wrong on the given inputs
        self.reference_agreed = reference_agreed  # the reference matched the op's forward on the given inputs
        self.wrong = set()
        self.seed = 1 if label == "given" else 1001

    # -- helpers -------------------------------------------------------------------------

    def attempt(self, what, run, trap="crashes"):
        try:
            return run()
        except UsageError:
            raise
        except Exception as error:  # the op's own failure, where autograd calls it, is the finding
            message = clip(f"{type(error).__name__}: {error}")
            if ("incorrect number of gradients" in message or "returned an invalid gradient" in message
                    or "returned a gradient different than None" in message):
                trap = "returns the wrong gradients"  # autograd's own check of what backward returned
            if "0 active drivers" in message and TRITON_IMPORTED_FIRST:
                raise UsageError("triton was imported before the backend was chosen, so it found no GPU and no "
                                 "interpreter: run with TRITON_INTERPRET=1, or import backward_checker before "
                                 "anything imports triton") from None
            if "0 active drivers" in message:
                message += " (it calls a GPU-only Triton API, which the interpreter lacks: check it on a GPU)"
            self.report.add(trap, f"{what}: {message}" + (f" (on the {self.label} inputs)" if self.label != "given" else ""))
            return None

    def where(self):
        return "" if self.label == "given" else f" (on inputs grown to {layouts.describe_shapes(self.values)})"

    def randoms(self, seed):
        return [random_like(o, seed + k) for k, o in enumerate(self.shapes)]

    def vjp(self, grad_outputs, values=None, frozen=(), fresh=True):
        """The op's gradients; grad_outputs are copied first (fresh=True), so that a backward that
        writes into its grad_output spoils no other check (a layout is passed as it is, fresh=False)."""
        if fresh:
            grad_outputs = [g.clone() for g in grad_outputs]
        return forward(self.op, frozen=frozen, values=values or self.values).grad(grad_outputs)

    def expected(self, grad_outputs):
        return self.truth.expected([g.detach().contiguous() for g in grad_outputs])

    def errors(self, got, expected, inputs=None):
        """{input: error in tolerances} for the inputs whose gradient is wrong; where finite differences
        are too noisy to decide, the input is left out and the report says so."""
        inputs = self.op.inputs if inputs is None else inputs
        noisy = [i for i in inputs if expected.tolerance[i] > NOISY]
        for i in noisy:
            text = (f"finite differences for `{self.op.slots[i].name}` are too noisy to decide (tolerance "
                    f"{expected.tolerance[i]:.2g}, relative){self.where()}: pass a reference")
            if text not in self.report.inconclusive:
                self.report.inconclusive.append(text)
        inputs = [i for i in inputs if i not in noisy]
        shapes = {i: self.values[i].shape for i in inputs}
        errors = {i: expected.error(got[i], i, shapes[i]) for i in inputs}
        return {i: e for i, e in errors.items() if e > 1.0}

    def same(self, a, b, inputs=None):
        """The inputs whose gradients differ between two of the op's own answers, beyond its tolerance."""
        inputs = self.op.inputs if inputs is None else inputs
        differ = {}
        for i in inputs:
            if (a[i] is None) != (b[i] is None):
                differ[i] = float("inf")
            elif a[i] is not None:
                error = relative_error(a[i].detach().double().reshape(-1), b[i].detach().double().reshape(-1)) \
                    if a[i].shape == b[i].shape else float("inf")
                if error > self.truth.base[i]:
                    differ[i] = error
        return differ

    def name(self, i):
        return self.op.input_name(i) + ": " if len(self.op.inputs) > 1 else ""

    # -- the battery ---------------------------------------------------------------------

    def run(self):
        if self.label != "given":  # growing is the checker's idea: an op may refuse the new sizes, loudly
            try:
                forward(self.op, values=self.values)
            except Exception as error:  # noqa: BLE001
                self.report.note(f"refuses the inputs grown to {layouts.describe_shapes(self.values)} "
                                 f"({clip(f'{type(error).__name__}: {error}', 100)}): pass inputs of several "
                                 f"thousand elements yourself to check every block and the tail")
                return False
        first = self.attempt("the forward raised", lambda: forward(self.op, values=self.values))
        if first is None:
            return False
        if not first.graded:
            raise UsageError(f"{self.op.name} returned no floating-point tensor that carries a gradient")
        self.shapes = [o.detach() for o in first.graded]
        self.graded = [k for k, t in enumerate(first.outputs) if carries_gradient(t)]
        self.truth = self.attempt("the forward, differenced for the right gradient", lambda: Truth(
            self.op, self.values, self.reference, self.graded, sample=self.label != "given"))
        if self.truth is None:
            return False
        forward_error = self.truth.calibrate(first.graded)
        if forward_error and self.truth.decides and forward_error > 2 * TOLERANCE.get(self.shapes[0].dtype, 1e-4):
            self.report.note(f"the op's forward is {forward_error:.3g} (relative) off the reference{self.where()}, "
                             f"so its gradients are held to {4 * forward_error:.3g}")
        if not self.truth.decides and self.label != "given" and self.reference_agreed:
            self.report.add("covers only part of a large input",
                            f"the forward matches the reference on the given inputs, but is {forward_error:.3g} "
                            f"(relative) off it{self.where()}: its grid, or its mask, stops short")
            return False
        if not self.truth.decides:
            self.report.inconclusive.append(
                f"the op's forward is {forward_error:.3g} (relative) off the reference{self.where()}: is it the "
                f"right reference? Its gradients were not compared with the reference's")
        self.forward_writes(first)
        state = self.keeps_state()
        if state is None:
            return False
        if state:  # every later check compares the op with itself, and a stateful op disagrees with itself
            return True
        if self.random_grad_output() is None:
            return False
        self.layouts()
        self.transposed_inputs()
        self.fan_in()
        self.frozen_inputs()
        if is_function(self.op.fn):
            self.returned_gradients()
        return True

    # 1. The forward must leave its inputs alone, unless it says so (ctx.mark_dirty returns them).
    def forward_writes(self, run):
        for i, (slot, given, passed) in enumerate(zip(self.op.slots, self.values, run.passed)):
            if not isinstance(given, torch.Tensor):
                continue
            change = largest_change(given.to(passed.dtype), passed.detach())
            declared = any(o is passed for o in run.outputs)  # ctx.mark_dirty returns the very tensor
            if change and not declared:
                self.report.add("writes into an input or a saved tensor",
                                f"the forward changed `{slot.name}` (largest change {change:.3g}) and did not "
                                f"declare it (ctx.mark_dirty){self.where()}; {self.harm(i)}")

    def harm(self, i):
        """The sibling a write into input i hurts: (h * h * w).sum() beside the op saves h for its backward."""
        if not differentiable(self.values[i]):
            return "any other consumer of that tensor reads the changed values"
        leaves, passed = self.op.fresh(values=self.values)
        if leaves[i] is None:
            return "any other consumer of that tensor reads the changed values"
        h = passed[i]
        w = random_like(h, self.seed + 50)
        sibling = (h * h * w).sum()
        g = self.randoms(self.seed + 60)
        outs = [o for o in flatten(seeded_call(self.op, passed)) if carries_gradient(o)]
        loss = sum((o * gk).sum() for o, gk in zip(outs, g)) + sibling
        try:
            got, = torch.autograd.grad(loss, [leaves[i]], allow_unused=True)
        except RuntimeError as error:  # autograd's version counter saw it: a write through torch, not a kernel
            return f"autograd refuses the sibling's backward ({clip(error, 90)})"
        expected = self.expected(g)
        sibling_grad = (2 * self.values[i].double() * w.double()).reshape(-1)
        index = expected.indices[i]
        want = expected.grads[i] + (sibling_grad if index is None else sibling_grad[index])
        got = None if got is None else got.double().reshape(-1)
        off = float("inf") if got is None else (want - (got if index is None else got[index])).abs().max().item()
        return (f"beside it, (h * h * w).sum() saved h for its backward, and the input's gradient there is off by "
                f"up to {off:.3g}")

    # 2. One call must not depend on another: the same call twice, then two calls in one graph.
    def keeps_state(self):
        g = self.randoms(self.seed)
        first = self.attempt("with a random grad_output", lambda: self.vjp(g))
        second = self.attempt("called again", lambda: self.vjp(g))
        if first is None or second is None:
            return None
        self.first = first
        differ = self.same(first, second)
        if differ:
            i = min(differ)
            self.report.add("keeps state between calls",
                            f"{self.name(i)}the same call made twice gave two gradients ({differ[i]:.3g} apart, "
                            f"relative){self.where()}: the backward depends on an earlier call")
            return True
        if self.twice_over_one_graph(g):
            return True
        other = [layouts.jittered(v, seed=self.seed + 70) if differentiable(v) else v for v in self.values]
        b = self.randoms(self.seed + 80)
        alone = self.attempt("on other inputs", lambda: self.vjp(b, values=other))
        together = self.attempt("used twice in one graph", lambda: self.two_uses(g, other, b))
        if alone is None or together is None:
            return None
        if self.reference is not None and self.truth.decides:  # a cache keyed by shape: right once, then wrong
            other_truth = Truth(self.op, other, self.reference, self.graded)
            wrong = {i: e for i, e in self.errors(alone, other_truth.expected(b)).items() if i not in self.known_wrong}
            first_right = not self.errors(first, self.expected(g))
            if wrong and first_right:
                i = min(wrong)
                self.report.add("keeps state between calls",
                                f"{self.name(i)}right for the first call, wrong for a second call on other values of "
                                f"the same shape ({other_truth.expected(b).raw_error(alone[i], i):.3g} off, "
                                f"relative){self.where()}: the backward uses what an earlier call left behind")
                return True
        for got, want, which in ((together[0], first, "x1"), (together[1], alone, "x2")):
            differ = self.same(got, want)
            if differ:
                i = min(differ)
                self.report.add("keeps state between calls",
                                f"{self.name(i)}op(x1) and op(x2) in one graph, (op(x1) * a).sum() + "
                                f"(op(x2) * b).sum(): {which}'s gradient differs from the same call made alone "
                                f"({differ[i]:.3g}, relative){self.where()}: one call's backward used what the "
                                f"other call left behind")
                return True
        return False

    def twice_over_one_graph(self, g):
        """loss.backward(retain_graph=True), twice: the second call must give what the first gave, so the
        backward may not change what it saved (a saved gradient scaled in place, say)."""
        run = self.attempt("for backward twice over one graph", lambda: forward(self.op, values=self.values))
        if run is None:
            return None
        node = run.graded[0].grad_fn
        saved = [None if t is None else t.detach().clone() for t in getattr(node, "saved_tensors", ()) or ()]
        once = self.attempt("the backward, with retain_graph=True",
                            lambda: run.grad([t.clone() for t in g], retain_graph=True))
        if once is None:
            return None
        try:
            again = run.grad([t.clone() for t in g], retain_graph=True)  # kept, to read what it saved
        except Exception as error:  # noqa: BLE001  (refusing a second backward, loudly, is legal)
            if "modified by an inplace operation" in str(error):  # autograd's version counter caught a write
                self.report.add("writes into an input or a saved tensor",
                                f"a second backward over one graph (retain_graph=True) is refused: "
                                f"{clip(error, 120)}: the first backward wrote into a tensor it saved{self.where()}")
                return True
            self.report.note(f"backward cannot run twice over one graph (retain_graph=True): "
                             f"{clip(f'{type(error).__name__}: {error}', 100)}")
            return False
        changed = [k for k, (before, now) in enumerate(zip(saved, getattr(node, "saved_tensors", ()) or ()))
                   if before is not None and now is not None and largest_change(before, now.detach())]
        differ = self.same(once, again)
        if changed:
            self.report.add("writes into an input or a saved tensor",
                            f"the backward changed saved tensor {changed[0]} (ctx.saved_tensors[{changed[0]}])"
                            + (f", so backward run twice over one graph (retain_graph=True) gives another "
                               f"gradient the second time ({differ[min(differ)]:.3g} apart, relative)" if differ
                               else "") + self.where())
            return True
        if differ:
            i = min(differ)
            self.report.add("keeps state between calls",
                            f"{self.name(i)}backward run twice over one graph (retain_graph=True) gave two "
                            f"gradients ({differ[i]:.3g} apart, relative){self.where()}: it changes what it "
                            f"kept on ctx")
            return True
        return False

    def two_uses(self, g, other, b):
        """Both forwards run before either backward, as for the same op in two layers."""
        one, two = forward(self.op, values=self.values), forward(self.op, values=other)
        loss = sum((o * gk).sum() for o, gk in zip(one.graded, g)) + sum((o * bk).sum() for o, bk in zip(two.graded, b))
        wanted = [x for x in one.leaves + two.leaves if x is not None]
        grads = iter(torch.autograd.grad(loss, wanted, allow_unused=True))
        got = [next(grads) if x is not None else None for x in one.leaves + two.leaves]
        return got[:len(one.leaves)], got[len(one.leaves):]

    # 3. A random grad_output, against the right gradient; a wrong gradient is diagnosed per input.
    def random_grad_output(self):
        g = self.randoms(self.seed)
        kept = [t.clone() for t in g]
        run = self.attempt("with a random grad_output", lambda: forward(self.op, values=self.values))
        if run is None:
            return None
        after_forward = [p.detach().clone() if isinstance(p, torch.Tensor) else None for p in run.passed]
        outputs = [o.detach().clone() for o in run.outputs]
        got = self.attempt("the backward, with a random grad_output", lambda: run.grad(g))
        if got is None:
            return None
        self.backward_writes(run, after_forward, outputs, g, kept)
        if not self.truth.decides:
            return got
        expected = self.expected(kept)
        wrong = {i: e for i, e in self.errors(got, expected).items() if i not in self.known_wrong}
        for i in sorted(wrong):
            self.wrong.add(i)
            self.report.fail("random grad_output")
            self.diagnose(i, got, expected, kept)
        if not wrong and not self.known_wrong:
            self.report.ok("random grad_output")
        return got

    def diagnose(self, i, got, expected, g):
        """Which trap explains input i's wrong gradient under a random grad_output."""
        who, where = self.name(i), self.where()
        if got[i] is None:
            self.report.add("returns the wrong gradients", f"{who}backward returned None for it, though it needs a "
                            f"gradient (autograd takes None as zeros){where}")
            return
        if self.label != "given" and self.partial(i, got, expected):
            return
        positional = is_function(self.op.fn) and not isinstance(self.op.slots[i].key, str)
        narrowed = self.attempt("backward called directly", lambda: self.narrowed(i)) if positional else ""
        if narrowed:
            self.report.add("returns the wrong gradients", f"{who}{narrowed}{where}")
            return
        ones = self.expected([uniform_like(o, 1.0) for o in self.shapes])
        if ones.error(got[i], i, self.values[i].shape) <= 1.0:
            self.report.add("ignores grad_output", f"{who}with a random grad_output the gradient is the one for "
                            f"grad_output = 1 everywhere ({expected.raw_error(got[i], i):.3g} off, relative){where}")
            return
        for k in range(len(self.shapes) if len(self.shapes) > 1 else 0):  # one output's grad_output at a time
            gk = [g[j] if j == k else uniform_like(o, 1.0) for j, o in enumerate(self.shapes)]
            got_k = self.attempt(f"with only output {k}'s grad_output random", lambda: self.vjp(gk))
            if got_k is not None and ones.error(got_k[i], i, self.values[i].shape) <= 1.0 \
                    and self.expected(gk).error(got_k[i], i, self.values[i].shape) > 1.0:
                self.report.add("ignores grad_output", f"{who}with a random grad_output for output {k} (1 for the "
                                f"others), the gradient is the one for grad_output = 1 everywhere: it ignores "
                                f"output {k}'s grad_output{where}")
                return
        uniform_right = True
        for c in (2.0, 5.0):  # each output its own constant, so swapped grad_outputs do not pass as uniform
            gc = [uniform_like(o, c * (1 + k)) for k, o in enumerate(self.shapes)]
            got_c = self.attempt(f"with grad_output = {c:g} everywhere", lambda: self.vjp(gc))
            if got_c is None:
                return
            uniform_right &= self.expected(gc).error(got_c[i], i, self.values[i].shape) <= 1.0
        if uniform_right:
            flat = torch.cat([t.reshape(-1) for t in g])
            first = self.expected([uniform_like(o, flat[0].item()) for o in self.shapes])
            mean = self.expected([uniform_like(o, flat.mean().item()) for o in self.shapes])
            which = ("the one for grad_output[0] everywhere" if first.error(got[i], i, self.values[i].shape) <= 1 else
                     "the one for grad_output's mean everywhere" if mean.error(got[i], i, self.values[i].shape) <= 1
                     else "another")
            self.report.add("assumes a uniform grad_output",
                            f"{who}right for grad_output = 2 and 5 everywhere, wrong for a random one "
                            f"({expected.raw_error(got[i], i):.3g} off, relative); the gradient is {which}{where}")
            return
        self.report.add("a wrong formula", f"{who}wrong even for a uniform grad_output of 2 "
                        f"({expected.raw_error(got[i], i):.3g} off, relative, under a random one){where}")

    def partial(self, i, got, expected):
        """On grown inputs, right on the given ones: is the error confined to the elements past a point?"""
        g = got[i].detach().double().reshape(-1)
        index = expected.indices[i]
        sample = g if index is None else g[index]
        positions = torch.arange(g.numel(), device=g.device) if index is None else index
        want = expected.grads[i]
        bad = (sample - want).abs() > expected.tolerance[i] * max(want.abs().max().item(), 1e-30)
        if not bad.any() or bad.all():
            return False
        first_bad = positions[bad].min().item()
        if bad[positions >= first_bad].float().mean().item() < 0.9 or bad[positions < first_bad].any():
            return False
        n = g.numel()
        self.report.add("covers only part of a large input",
                        f"{self.name(i)}right for the given inputs; on inputs grown to "
                        f"{layouts.describe_shapes(self.values)}, the first {first_bad} of {n} elements of the "
                        f"gradient are right and the rest wrong: the grid, or the mask, stops short of the tail")
        return True

    # 4. The backward must leave grad_output, the inputs and the outputs alone.
    def backward_writes(self, run, after_forward, outputs, g, kept):
        change = max(largest_change(a, b) for a, b in zip(kept, g))
        if change:
            self.report.add("mutates grad_output in place",
                            f"grad_output changed during the backward (largest change {change:.3g}); "
                            f"{self.sibling()}")
        else:
            self.report.ok("grad_output unchanged")
        for slot, before, now in zip(self.op.slots, after_forward, run.passed):
            if before is not None and largest_change(before, now.detach()):
                self.report.add("writes into an input or a saved tensor",
                                f"the backward changed `{slot.name}` (largest change "
                                f"{largest_change(before, now.detach()):.3g}): the caller's tensor, and any other "
                                f"node that saved it, now hold other values{self.where()}")
        for k, (before, now) in enumerate(zip(outputs, run.outputs)):
            if largest_change(before, now.detach()):
                self.report.add("writes into an input or a saved tensor",
                                f"the backward changed output {k} (largest change "
                                f"{largest_change(before, now.detach()):.3g}), which the caller holds{self.where()}")

    def sibling(self):
        """((op(x) + y) * w).sum(), the op made last so its backward runs first: y.grad must be w exactly."""
        out = self.shapes[0]
        y = torch.zeros_like(out).requires_grad_(True)
        w = random_like(out, self.seed + 90)
        sibling = y * 1.0  # made before the op, so the engine runs the op's backward first
        run = forward(self.op, values=self.values)
        loss = ((run.graded[0] + sibling) * w).sum() + sum((o * 0).sum() for o in run.graded[1:])
        wanted = [y] + [x for x in run.leaves if x is not None]  # the op's backward must run too
        grad_y = torch.autograd.grad(loss, wanted, allow_unused=True)[0]
        off = (grad_y - w).abs().max().item()
        return f"beside it, in ((op(x) + y) * w).sum(), y.grad must equal w but is off by up to {off:.3g}"

    # 5. The layouts autograd hands on: against the same values made contiguous.
    def layouts(self):
        if self.wrong or self.known_wrong or "mutates grad_output in place" in self.report.traps:
            return  # a write into grad_output fails on a stride-0 one for that reason alone
        for k, out in enumerate(self.shapes):
            chosen = layouts.layouts_for(out, self.seed + 10 * k)
            for label, g_layout in chosen:
                g = self.randoms(self.seed + 20)
                g_contiguous = list(g)
                g[k], g_contiguous[k] = g_layout, g_layout.contiguous()
                want = self.attempt(f"with grad_output {label} made contiguous", lambda: self.vjp(g_contiguous))
                if want is None:
                    return self.report.fail("the layouts autograd hands on")
                got = self.attempt(f"with a grad_output {label} (strides {g_layout.stride()})",
                                   lambda: self.vjp(g, fresh=False),
                                   trap="assumes a contiguous grad_output")
                if got is None:
                    return self.report.fail("the layouts autograd hands on")
                differ = self.same(got, want)
                if differ:
                    i = min(differ)
                    if "transpose" in label and self.laid_out_like_input(i, k, g_contiguous):
                        return self.report.fail("the layouts autograd hands on")
                    self.report.fail("the layouts autograd hands on")
                    self.report.add("assumes a contiguous grad_output",
                                    f"{self.name(i)}with a grad_output {label} (strides {tuple(g_layout.stride())}), "
                                    f"the gradient is {differ[i]:.3g} (relative) off the one for the same values "
                                    f"made contiguous{self.where()}")
                    return
        self.report.ok("the layouts autograd hands on")

    def laid_out_like_input(self, i, k, g_contiguous):
        """Right when grad_output and the input are both transposed: it reads grad_output with x's strides."""
        x = self.values[i]
        if x.dim() < 2 or x.shape != self.shapes[k].shape:
            return False
        values = list(self.values)
        values[i] = layouts.transposed_copy(x)
        g = list(g_contiguous)
        g[k] = layouts.transposed_copy(g_contiguous[k])
        want = self.attempt("with contiguous x and grad_output", lambda: self.vjp(g_contiguous))
        both = self.attempt("with x and grad_output both transposed", lambda: self.vjp(g, values=values, fresh=False))
        if want is None or both is None or self.same(both, want, [i]):
            return False
        self.report.add("assumes grad_output is laid out like its input",
                        f"{self.name(i)}wrong when grad_output is transposed and x is not, right when both are: "
                        f"the backward reads grad_output with x's strides{self.where()}")
        return True

    # 6. An input laid out transposed: the same values, another layout.
    def transposed_inputs(self):
        layout_traps = {"assumes a contiguous grad_output", "assumes grad_output is laid out like its input"}
        if self.wrong or self.known_wrong or layout_traps & set(self.report.traps):
            return  # a layout trap already explains it
        g = self.randoms(self.seed + 30)
        for i in self.op.inputs:
            if self.values[i].dim() < 2:
                continue
            values = list(self.values)
            values[i] = layouts.transposed_copy(self.values[i])
            want = self.attempt("with contiguous inputs", lambda: forward(self.op, values=self.values))
            if want is None:
                return
            try:
                run = forward(self.op, values=values)
            except Exception as error:  # noqa: BLE001  (refusing a layout, loudly, is legal)
                self.report.note(f"refuses `{self.op.slots[i].name}` laid out transposed "
                                 f"({clip(f'{type(error).__name__}: {error}', 100)})")
                continue
            off = max((relative_error(a.detach().double().reshape(-1), b.detach().double().reshape(-1))
                       for a, b in zip(run.graded, want.graded)), default=0.0)
            if off > max(self.truth.base[i], 1e-6):
                self.report.add("assumes a contiguous input",
                                f"with `{self.op.slots[i].name}` laid out transposed (the same values), the forward's "
                                f"output is {off:.3g} (relative) off{self.where()}")
                return
            got, ref = run.grad([t.clone() for t in g]), want.grad([t.clone() for t in g])  # a copy each
            differ = self.same(got, ref)
            if differ:
                j = min(differ)
                self.report.add("assumes a contiguous input",
                                f"{self.name(j)}with `{self.op.slots[i].name}` laid out transposed (the same values), "
                                f"the forward is right but the gradient is {differ[j]:.3g} (relative) off: the backward "
                                f"reads the saved input as if contiguous{self.where()}")
                return

    # 7. Fan-in: one forward, two consumers; the backward is called once, with a + b.
    def fan_in(self):
        if self.wrong or self.known_wrong or not self.truth.decides:
            return
        a, b = self.randoms(self.seed + 40), self.randoms(self.seed + 45)

        def both():
            run = forward(self.op, values=self.values)
            loss = sum((o * ak).sum() + (o * bk).sum() for o, ak, bk in zip(run.graded, a, b))
            wanted = [x for x in run.leaves if x is not None]
            grads = iter(torch.autograd.grad(loss, wanted, allow_unused=True))
            return [next(grads) if x is not None else None for x in run.leaves]

        got = self.attempt("under fan-in", both)
        if got is None:
            return self.report.fail("fan-in")
        wrong = self.errors(got, self.expected([ak + bk for ak, bk in zip(a, b)]))
        if wrong:
            i = min(wrong)
            self.report.fail("fan-in")
            self.report.add("assumes a single use", f"{self.name(i)}z = op(x) used twice, (z * a).sum() + "
                            f"(z * b).sum(): one backward call with a + b, and the gradient is wrong{self.where()}")
        else:
            self.report.ok("fan-in")

    # 8. Each input frozen in turn: the others' gradients must not change.
    def frozen_inputs(self):
        if len(self.op.inputs) < 2 or self.wrong or self.known_wrong or not self.truth.decides:
            return
        g = self.randoms(self.seed + 50)
        expected = self.expected(g)
        for i in self.op.inputs:
            got = self.attempt(f"with `{self.op.slots[i].name}` frozen", lambda: self.vjp(g, frozen={i}))
            if got is None:
                return self.report.fail("each input frozen in turn")
            others = [j for j in self.op.inputs if j != i]
            wrong = self.errors(got, expected, others)
            if wrong:
                j = min(wrong)
                self.report.fail("each input frozen in turn")
                self.report.add("returns the wrong gradients",
                                f"with `{self.op.slots[i].name}` frozen (requires_grad=False), "
                                f"`{self.op.slots[j].name}`'s gradient is "
                                + ("None" if got[j] is None else f"{expected.raw_error(got[j], j):.3g} (relative) off")
                                + f", though it is right with every input wanting a gradient{self.where()}")
                return
        self.report.ok("each input frozen in turn")

    # What backward returns, before autograd checks, casts or drops it.
    def returned_gradients(self):
        frozen_sets = [()] + ([(i,) for i in self.op.inputs] if len(self.op.inputs) > 1 else [])
        for frozen in frozen_sets:
            problem = self.attempt("backward called directly", lambda: self.returned(frozen))
            if problem is None:
                return
            if problem:
                self.report.add("returns the wrong gradients", problem)
                return
        self.report.ok("what backward returns")

    def direct_backward(self, frozen=()):
        """What the Function's backward returns, called as autograd calls it: (its values, one per
        positional input of forward or more, the run it answered)."""
        run = forward(self.op, frozen=frozen, values=self.values)
        g = self.randoms(self.seed + 55)
        context = run.graded[0].grad_fn
        with torch.no_grad():
            try:
                returned = self.op.fn.backward(context, *self._all_grad_outputs(run, g, materialize=True))
            except Exception:  # noqa: BLE001  after ctx.set_materialize_grads(False) autograd passes None instead
                returned = self.op.fn.backward(context, *self._all_grad_outputs(run, g, materialize=False))
        return (returned if isinstance(returned, tuple) else (returned,)), run

    def narrowed(self, i):
        """Where backward returns input i's gradient in a narrower dtype than the input (float16 for
        float32, an integer one), what autograd's cast back cannot undo; else ''."""
        returned, run = self.direct_backward()
        grad, passed = (returned[i] if i < len(returned) else None), run.passed[i]
        if not isinstance(grad, torch.Tensor) or grad.dtype == passed.dtype:
            return ""
        if grad.is_floating_point() and grad.dtype.itemsize >= passed.dtype.itemsize:
            return ""
        return (f"`{self.op.slots[i].name}` is {passed.dtype}, but backward returns a {grad.dtype} gradient: "
                f"autograd casts it back, after the rounding")

    def returned(self, frozen):
        returned, run = self.direct_backward(frozen)
        positional = [s for s in self.op.slots if not isinstance(s.key, str)]
        if len(returned) > len(positional) and all(r is None for r in returned[len(positional):]):
            returned = returned[:len(positional)]  # trailing Nones: autograd drops them
        if len(returned) != len(positional):
            return f"backward returned {len(returned)} value(s) for {len(positional)} input(s) of forward"
        for i, (slot, grad, passed) in enumerate(zip(positional, returned, run.passed)):
            wants = i in self.op.inputs and i not in frozen
            if grad is None:  # legal: autograd takes it as zeros, and the value checks judge that
                continue
            if not isinstance(grad, torch.Tensor):
                return f"backward returned a {type(grad).__name__} for `{slot.name}`, not a tensor or None"
            if not wants:
                why = "it is frozen" if i in frozen else "it takes none"
                self.report.note(f"backward computes a gradient for `{slot.name}` when {why} "
                                 f"(ctx.needs_input_grad[{i}] is False): autograd throws it away, and the work "
                                 f"is wasted")
                continue
            if tuple(grad.shape) != tuple(passed.shape) or grad.device != passed.device:
                return (f"`{slot.name}` is {tuple(passed.shape)} on {passed.device}, but its gradient is "
                        f"{tuple(grad.shape)} on {grad.device}")
            if grad.dtype != passed.dtype and grad.is_floating_point() and grad.dtype.itemsize > passed.dtype.itemsize:
                self.report.note(f"backward returns a {grad.dtype} gradient for `{slot.name}`, which is "
                                 f"{passed.dtype}: autograd casts it back, and the wider work and memory are wasted")
        return ""

    @staticmethod
    def _all_grad_outputs(run, g, materialize):
        """One grad_output per output of forward, as autograd passes them: for a tensor that carries
        none, zeros (None after ctx.set_materialize_grads(False), which ctx does not let one read back);
        None for a value that is no tensor."""
        it = iter(g)
        raw = run.raw if isinstance(run.raw, tuple) else (run.raw,)
        return [None if not isinstance(o, torch.Tensor) else next(it) if carries_gradient(o)
                else (torch.zeros_like(o) if materialize else None) for o in raw]


# create_graph=True: refuse, or be right.
def second_order_problem(op, reference, report):
    g = [random_like(o, 10) for o in forward(op).graded]

    def penalty(fn):
        run = forward(op, fn=fn)
        wanted = [x for x in run.leaves if x is not None]
        first = torch.autograd.grad(run.graded, wanted, g, create_graph=True, allow_unused=True)
        first = [d for d in first if d is not None and d.requires_grad]
        if not first:
            return None
        penalty_grads = torch.autograd.grad(sum((d ** 2).sum() for d in first), wanted, allow_unused=True)
        return [torch.zeros_like(x) if p is None else p for x, p in zip(wanted, penalty_grads)]

    try:
        got = penalty(None)
    except RuntimeError:  # refused: the safe answer
        report.ok("create_graph=True")
        return
    if got is None:  # a constant gradient: right only if the op is linear in its inputs
        if reference is None:
            report.inconclusive.append("with create_graph=True the gradient carries no graph, which is right only "
                                       "for an op linear in its inputs: pass a reference to decide")
            return
        want = penalty(reference)
        if want is None or not any(bool(w.any()) for w in want):
            report.ok("create_graph=True")
            return
        report.add("a silently wrong second derivative",
                   "with create_graph=True the gradient came back as a constant (it carries no graph) and nothing "
                   "was raised: a gradient penalty built on it silently contributes nothing")
        return
    if reference is None:
        report.ok("create_graph=True")
        return
    want = penalty(reference)
    if want is None:
        want = [torch.zeros_like(a) for a in got]
    errors = [relative_error(a.double().reshape(-1), b.double().reshape(-1)) for a, b in zip(got, want)]
    if max(errors, default=0.0) > 1e-3:
        report.add("a silently wrong second derivative",
                   f"the gradient of |dL/dx|^2 (a gradient penalty) is {max(errors):.3g} (relative) off, and nothing "
                   f"was raised: the backward's output carries no graph")
    else:
        report.ok("create_graph=True")
