"""Values: the forward against the reference, and the gradient under a random grad_output against the
right one, input by input; a wrong gradient is diagnosed by the ladder in diagnose()."""
import math

import torch

from ..calling import OutOfMemory, is_function
from .context import OpFaulted, OpRaised
from ..report import (CONTIGUOUS_INPUT, COVERS_PART, FORWARD_PRECISION, IGNORES_GRAD_OUTPUT, KEEPS_STATE,
                     LAID_OUT_LIKE_INPUT, RETURNS_WRONG, UNIFORM_GRAD_OUTPUT, WRONG_FORMULA, WRONG_FORWARD, Finding,
                     Note, Passed, Undecided)
from .returned import direct_backward
from .state import right_on_a_new_shape
from ..strategies import describe_shapes, grow, growth_plans, protected_sizes, randn, uniform_like
from .strides import laid_out_as
from .truth import FORWARD_WRONG, ROUNDING_TIMES, TOLERANCE, RandomDirections, Truth, flat, relative_error


# what follows a forward right on the given inputs and wrong on the grown
SIZE_WRONG = ": a size it gets wrong (a dimension mixed up, say), which the given shape hides"

def the_forward(context, check):
    """The forward's outputs against the reference's. Far off is a wrong forward, or, where the outputs are
    right on a prefix and wrong from there on, a grid or mask that stops short; a little off, a note, and
    the gradients are held to the precision the forward achieves."""
    error = context.forward_error
    precise = 2 * TOLERANCE.get(context.outputs[0].dtype, 1e-4)
    given = context.given.forward_error if context.grown and context.given is not None else None
    if error > FORWARD_WRONG:
        if context.grown and given is not None and given > FORWARD_WRONG:
            return []  # the given inputs' finding says it
        laid_out = given_layout_at_fault(context)
        if laid_out:
            return [context.finding(check, CONTIGUOUS_INPUT, f"the forward is {error:.3g} (relative) off the reference "
                                                             f"with {laid_out} as given, and right with the same "
                                                             f"values contiguous", input=laid_out)]
        stop = forward_stops_short(context)
        if stop:
            return [context.finding(check, COVERS_PART, f"the forward is {error:.3g} (relative) off the reference",
                                    then=f": {stop}, so its grid, or its mask, stops short")]
        if context.grown:
            return [context.finding(check, WRONG_FORWARD, f"the forward matches the reference on the given inputs, "
                                                          f"but is {error:.3g} (relative) off it from its first "
                                                          f"element on", then=SIZE_WRONG)]
        return [context.finding(check, WRONG_FORWARD, f"the forward's output is {error:.3g} (relative) off the "
                                                      f"reference's: a wrong forward, or the wrong reference; its "
                                                      f"gradients are not judged against that reference")]
    if context.grown and given is not None and given <= precise and error > 10 * max(given, precise):
        return [context.finding(check, WRONG_FORWARD, f"the forward is {given:.3g} (relative) off the reference on "
                                                      f"the given inputs and {error:.3g} off it", then=SIZE_WRONG)]
    if error > precise:
        return [Note(check, f"the op's forward is {error:.3g} (relative) off the reference{context.where()}, so its "
                            f"gradients are held to {4 * error:.3g}", FORWARD_PRECISION)]
    return [Passed(check)]


def given_layout_at_fault(context):
    """The inputs given laid out otherwise than contiguous (`x`, ...) where the forward, wrong on them as given,
    is right on the same values made contiguous; else ''."""
    laid_out = [i for i in context.op.inputs if not context.values[i].is_contiguous()]
    if not laid_out:
        return ""
    values = [v.contiguous() if k in laid_out else v for k, v in enumerate(context.values)]
    try:
        outputs = context.run("with the inputs made contiguous", values=values, made_up=True).graded
    except (OpRaised, OutOfMemory):
        return ""
    if context.truth.forward_error(outputs) > FORWARD_WRONG:
        return ""
    return ", ".join(context.arg(i) for i in laid_out)


def forward_stops_short(context):
    """'output k's first m of n elements are right and the rest wrong' where an output is right on a prefix
    of at least RIGHT_PREFIX elements (to its dtype's precision, or the given inputs' error) and wrong from
    there on; else ''."""
    precise = 2 * TOLERANCE.get(context.outputs[0].dtype, 1e-4)
    given = context.given.forward_error if context.grown and context.given is not None else 0.0
    allowed = max(precise, 4 * given)
    for k, (ours, theirs) in enumerate(zip(context.outputs, context.truth.source.forward)):
        got, want = flat(ours), theirs.reshape(-1).to(ours.device)
        bad = ~((got - want).abs() <= allowed * max(want[want.isfinite()].abs().max().item()
                                                    if want.isfinite().any() else 0.0, 1e-30))
        bad &= ~((got.isnan() & want.isnan()) | (got.isinf() & (got == want)))
        if not bad.any() or bad.all():
            continue
        first_bad = int(bad.nonzero()[0].item())
        if first_bad >= RIGHT_PREFIX and bad[first_bad:].float().mean().item() >= TAIL_WRONG:
            which = f"output {k}'s" if len(context.outputs) > 1 else "its"
            return f"{which} first {first_bad} of {got.numel()} elements are right and the rest wrong"
    return ""


# A gradient off by less than this (or by two of its tolerances, in a narrow dtype), and by less than four
# tolerances, is too close to call: every trap the ladder below names is off by far more (a uniform
# grad_output by tens of percent), unless the error is a constant factor, which no rounding makes.
JUST_PAST = 1e-2
# Off by at most this (relative) under a random grad_output while right for uniform ones, and the answer for no
# single value of it: too little for the uniform trap (Undecided, not a finding).
NOISY_UNIFORM = 5e-2
# A gradient that is the right one times a constant (1 + e) is a wrong formula once |e| is this share of
# its tolerance, above what TF32's truncated operands can bias a product by (two operands, 2 ** -10 each at
# most), and four times what is left of the error besides it: rounding scatters, it does not scale.
SYSTEMATIC_SHARE = 0.5
SYSTEMATIC_FLOOR = 2e-3


def random_grad_output(context, check):
    """A random grad_output, against the right gradient, input by input; and, where the op has several
    outputs, each output's random grad_output alone (zeros for the others), so that one output's part of
    a gradient is judged on its own, not beside a larger one's."""
    if not context.forward_right:
        return [Undecided(check, "the forward disagrees with the reference, so the reference's gradient is "
                                 "not this op's", because="the forward")]
    g = context.randoms("random grad_output")
    handed = context.vjp(g, "the backward, with a random grad_output", raw=True)
    shared = {i: [j for j in context.op.inputs if j != i and handed[j] is not None and handed[j].numel() and
                  handed[j].untyped_storage().data_ptr() == handed[i].untyped_storage().data_ptr()]
              for i in context.op.inputs if handed[i] is not None and handed[i].numel()}
    got = [None if t is None else t.detach().clone() for t in handed]
    expected = context.expected(g)
    outcomes = [Undecided(check, context.why_loose(expected, i)) for i in context.noisy(expected)]
    earlier_wrong = {f.input for f in context.earlier if isinstance(f, Finding) and f.check == check}
    wrong = {i: (g, got, expected) for i in context.errors(got, expected)}
    for k in range(len(context.outputs) if len(context.outputs) > 1 else 0):
        alone = [gk if j == k else torch.zeros_like(gk) for j, gk in enumerate(g)]
        got_k = context.vjp(alone, f"with only output {k}'s grad_output nonzero")
        expected_k = context.expected(alone)
        for i in context.errors(got_k, expected_k):
            wrong.setdefault(i, (alone, got_k, expected_k))
    for i in sorted(wrong):
        if context.arg(i) not in earlier_wrong:
            g_i, got_i, expected_i = wrong[i]
            outcomes.append(diagnose(context, check, i, got_i, expected_i, g_i, shared.get(i, [])))
    return outcomes or [Passed(check)]


def systematic(got, expected, i):
    """The constant factor s where got is s times the right gradient but for a scatter far smaller than
    |s - 1| (and |s - 1| is a share of the tolerance); else None."""
    g, right = expected.sample(got, i), expected.grads[i]
    keep = g.isfinite() & right.isfinite()
    g, right = g[keep], right[keep]
    size = right.norm().item()
    if size == 0.0:
        return None
    s = (g @ right).item() / size ** 2
    scatter = (g - s * right).norm().item() / size
    e = abs(s - 1.0)
    return s if e >= max(SYSTEMATIC_SHARE * expected.tolerance[i], SYSTEMATIC_FLOOR) and e >= 4 * scatter else None


def diagnose(context, check, i, got, expected, g, shared=()):
    """Which trap explains input i's wrong gradient under grad_output g: None where a gradient is needed;
    right on the first elements and wrong from some element on, here or on the inputs grown (a grid or
    a mask that stops short); a gradient narrower than its input, or one tensor handed back for two
    inputs; right with grad_output laid out like an input given laid out otherwise (it reads grad_output at
    that input's strides); then, if it is only just past its tolerance, undecided; the gradient for grad_output = 1
    (everywhere, or for one output); one output's part missing; right for every uniform grad_output
    (which element it used); else a wrong formula."""
    who, where, shape = context.name(i), context.where(), context.values[i].shape  # for what it cannot decide

    def finding(trap, evidence):
        return context.finding(check, trap, evidence, i)

    off = expected.raw_error(got[i], i)
    if got[i] is None:
        return finding(RETURNS_WRONG, "backward returned None for it, though it needs a gradient (autograd takes "
                                      "None as zeros)")
    stop = stops_short(got[i], expected, i, context.op.slots[i].parts)
    if stop and not right_for_uniform(context, i):
        return finding(COVERS_PART, f"{stop}: the grid, or the mask, stops short of the tail")
    if not context.grown and not right_for_uniform(context, i):
        stop = stops_short_when_grown(context, i)
        if stop:
            return finding(COVERS_PART, f"the gradient is wrong from its first element on the given inputs "
                                        f"({off:.3g} off, relative), but on inputs grown to {stop}: the grid, or "
                                        f"the mask, stops short of the tail")
    narrow = narrowed(context, i)
    if narrow:
        return finding(RETURNS_WRONG, narrow)
    overwritten = [j for j in shared if expected.indices[j] is None and expected.indices[i] is None and
                   expected.grads[j].shape == expected.grads[i].shape and
                   expected.error(got[i], j, context.values[j].shape) <= 1.0 < expected.error(got[i], i, shape)]
    if overwritten:
        j = overwritten[0]
        return finding(RETURNS_WRONG, f"its gradient and {context.arg(j)}'s are one tensor, holding {context.arg(j)}'s "
                                      f"right gradient: the backward returns one workspace for both, and the "
                                      f"second gradient overwrote the first ({off:.3g} off, relative)")
    laid_out = right_with_grad_output_laid_out_like(context, i, g, expected)
    if laid_out:
        return finding(LAID_OUT_LIKE_INPUT, f"wrong with a contiguous grad_output ({off:.3g} off, relative), right "
                                            f"with grad_output laid out like {laid_out}, as given: the backward reads "
                                            f"grad_output with {laid_out}'s strides")
    near = near_miss(context, i, got, expected, g, off)
    if near:
        return Undecided(check, f"{who}the gradient is {off:.3g} (relative) off under a random grad_output, just past "
                                f"the {expected.tolerance[i]:.3g} this op's precision allows: too little for any trap, "
                                f"too much to call right; {near}{where}")
    block = right_within_a_block(context, i, got, expected)
    if block:
        return finding(COVERS_PART, f"the gradient is {off:.3g} (relative) off, but {block}: the grid, or the mask, "
                                    f"covers only the first block")
    ones = context.expected([uniform_like(o, 1.0) for o in context.outputs])
    # A backward whose answer triples with grad_output reads it, however close a random one's first value came to 1
    # (in bfloat16, grad_output[0] = 0.97 is 1 within the tolerance): that is the uniform trap, further on.
    if ((ones.error(got[i], i, shape) <= 1.0 or gives_its_answer_for_ones(context, i, got, ones))
            and not scales_with_grad_output(context, i, g, got)):
        return finding(IGNORES_GRAD_OUTPUT, f"with a random grad_output the gradient is the one for grad_output = 1 "
                                            f"everywhere ({off:.3g} off, relative)")
    for k in range(len(context.outputs) if len(context.outputs) > 1 else 0):  # one output's grad_output at a time
        gk = [g[j] if j == k else uniform_like(o, 1.0) for j, o in enumerate(context.outputs)]
        got_k = context.vjp(gk, f"with only output {k}'s grad_output random")
        if ones.error(got_k[i], i, shape) <= 1.0 and context.expected(gk).error(got_k[i], i, shape) > 1.0:
            return finding(IGNORES_GRAD_OUTPUT, f"with a random grad_output for output {k} (1 for the others), the "
                                                f"gradient is the one for grad_output = 1 everywhere: it ignores "
                                                f"output {k}'s grad_output")
        zk = [g[j] if j == k else torch.zeros_like(o) for j, o in enumerate(context.outputs)]
        want_k = context.expected(zk)
        got_zk = context.vjp(zk, f"with only output {k}'s grad_output nonzero")
        if want_k.error(None, i, shape) > 1.0 and (got_zk[i] is None or not flat(got_zk[i]).any()):
            return finding(IGNORES_GRAD_OUTPUT, f"with a grad_output for output {k} alone (zeros for the others), "
                                                f"the gradient is 0: the backward drops output {k}'s part, as if "
                                                f"its grad_output were always 0")
    if right_for_uniform(context, i):
        values = torch.cat([flat(t) for t in g])
        first = context.expected([uniform_like(o, values[0].item()) for o in context.outputs])
        mean = context.expected([uniform_like(o, values.mean().item()) for o in context.outputs])
        which = ("the one for grad_output[0] everywhere" if first.error(got[i], i, shape) <= 1 else
                 "the one for grad_output's mean everywhere" if mean.error(got[i], i, shape) <= 1 else
                 single_value(context, i, got, ones, shape))
        if which:
            return finding(UNIFORM_GRAD_OUTPUT, f"right for grad_output = 2 and 5 everywhere, wrong for a random one "
                                                f"({off:.3g} off, relative); the gradient is {which}")
        if off > NOISY_UNIFORM:
            return finding(UNIFORM_GRAD_OUTPUT, f"right for grad_output = 2 and 5 everywhere, wrong for a random one "
                                                f"({off:.3g} off, relative), and no single value of grad_output "
                                                f"everywhere gives it: the backward reads grad_output, but not each "
                                                f"element where it belongs")
        # Right for every uniform grad_output, a little off for a random one, and the answer for no single value: a
        # random grad_output's rounding in a low precision (bfloat16 attention), not a backward that reads one
        # element of it.
        return Undecided(check, f"{who}right for grad_output = 2 and 5 everywhere, {off:.3g} (relative) off for a "
                                f"random one, which no single value of grad_output explains: within what "
                                f"rounding can do, too little to call the uniform trap{where}")
    if not context.grown and right_on_a_new_shape(context, i):
        return finding(KEEPS_STATE, f"the gradient is {off:.3g} (relative) off, but right on values of a shape the "
                                    f"op had not seen: the backward keeps something per shape that an earlier call "
                                    f"left behind")
    one_value = reads_one_value(context, i, g, got)
    if one_value:
        return finding(UNIFORM_GRAD_OUTPUT, f"with a random grad_output the gradient is the op's own answer for "
                                            f"{one_value} everywhere, where the right gradients for the two differ "
                                            f"({off:.3g} off, relative): the backward reads {one_value} for every "
                                            f"element (it is wrong for a uniform grad_output too: that may be by "
                                            f"design, as a scale held constant, or a formula wrong besides)")
    return finding(WRONG_FORMULA, f"wrong even for a uniform grad_output of 2 ({off:.3g} off, relative, under a "
                                  f"random one{wrong_share(got[i], expected, i)})")


def scales_with_grad_output(context, i, g, got):
    """Whether input i's gradient under 3 g is nearer three times its gradient under g than that gradient itself: the
    backward reads grad_output (one element of it, say), whatever the right gradient for a uniform one (a
    normaliser's is 0, for which an answer that ignores grad_output and one that scales it look alike)."""
    if got[i] is None:
        return False
    try:
        tripled = context.vjp([3 * t for t in g], "with grad_output tripled")[i]
    except (OpRaised, OutOfMemory):
        return False
    if tripled is None:
        return False
    a, b = flat(tripled).double(), flat(got[i]).double().to(flat(tripled).device)
    return bool((a - 3 * b).norm() < (a - b).norm())


def reads_one_value(context, i, g, got):
    """'grad_output[0]' or "grad_output's mean" where input i's gradient under the random g is the op's own answer
    for that one value everywhere, though the right gradients for the two differ (the right gradient for their
    difference is not 0), and the backward reads grad_output (tripled, its answer triples); else ''. The op is
    compared with itself, not with the truth: a gradient wrong for a uniform grad_output as well (a scale the
    library holds constant by design, which finite differences see) still shows that it reads one value of a
    grad_output that differs by element. A legal op whose right gradient depends on grad_output only through one
    value (an output broadcast from a sum, which reads grad_output's sum) never differs from it there."""
    shape = context.values[i].shape
    values = torch.cat([flat(t) for t in g])
    if not values.numel() or bool((values == values[0]).all()):
        return ""
    for c, which in ((values[0].item(), "grad_output[0]"), (values.mean().item(), "grad_output's mean")):
        uniform = [uniform_like(o, c) for o in context.outputs]
        try:
            mine = context.vjp(uniform, f"with {which} everywhere")
        except (OpRaised, OutOfMemory):
            return ""
        if context.same(got, mine, [i]):
            continue
        if context.expected([t - u for t, u in zip(g, uniform)]).error(None, i, shape) <= 1.0:
            continue
        return which if scales_with_grad_output(context, i, g, got) else ""
    return ""


def single_value(context, i, got, ones, shape):
    """'the one for grad_output = c everywhere' where some single value c (fitted to input i's gradient against
    the right gradient for ones) makes the gradient right; else ''."""
    right = ones.grads[i]
    sample = ones.sample(got[i], i).to(device=right.device, dtype=torch.float64)
    keep = sample.isfinite() & right.isfinite()
    size = float((right[keep] @ right[keep]).item()) if keep.any() else 0.0
    if size == 0.0:
        return ""
    c = float((sample[keep] @ right[keep]).item()) / size
    fitted = context.expected([uniform_like(o, c) for o in context.outputs])
    single = fitted.error(got[i], i, shape) <= 1
    return f"the one for grad_output = {c:.3g} everywhere, a single value" if single else ""


def right_with_grad_output_laid_out_like(context, i, g, expected):
    """The input given laid out otherwise than contiguous (`x`), of its output's shape, with which laying out a
    grad_output the backward gets wrong makes input i's gradient right; else ''. A kernel that reads grad_output
    at x's strides is right only when the two agree (the checker's own laid-out inputs find it where x is given
    contiguous)."""
    for j in context.op.inputs:
        x = context.values[j]
        shapes = [k for k, o in enumerate(context.outputs) if o.shape == x.shape]
        if x.is_contiguous() or not shapes:
            continue
        laid = [laid_out_as(t, x) if k == shapes[0] else t for k, t in enumerate(g)]
        try:
            got = context.vjp(laid, f"with grad_output laid out like {context.arg(j)}", fresh=False)
        except (OpRaised, OutOfMemory):
            continue
        if expected.error(got[i], i, context.values[i].shape) <= 1.0:
            return context.arg(j)
    return ""


def gives_its_answer_for_ones(context, i, got, ones):
    """Whether input i's gradient under a random grad_output is the op's own answer for grad_output = 1
    everywhere, and that answer the right one for ones (ones: the right gradients for it), each compared
    beside the right gradient's size under a random grad_output: where the right gradient for ones is 0 but
    for rounding (a normaliser's), the op's rounding and the reference's differ however right the op is, and
    only the op itself can say that its answer did not move. A backward that returns zeros whatever it is
    given is a wrong formula where the gradient for ones is not 0."""
    mine = context.vjp([uniform_like(o, 1.0) for o in context.outputs], "with grad_output = 1 everywhere")
    if mine[i] is None or ones.indices[i] is not None or context.same(got, mine, [i]):
        return False  # (where only a sample of the right gradient is known, the truth's own comparison decides)
    right = relative_error(flat(mine[i]), ones.grads[i].to(mine[i].device), typical=context.typical(i),
                           allowance=context.rounding_floor)
    return right <= context.tolerance(i)


def right_for_uniform(context, i, values=None):
    """Whether input i's gradient is right for grad_output = 2 and = 5 everywhere (each output its own
    constant, so swapped grad_outputs do not pass as uniform): a gradient wrong only for a grad_output that
    varies is no grid's fault, however right its first row (grad_output[0] is that row's own value)."""
    shape = context.values[i].shape if values is None else values[i].shape
    expected = context.expected if values is None else Truth(context.op, values, context.reference,
                                                             context.graded_positions, sample=True).expected
    outputs = context.outputs if values is None else context.run("on the inputs grown", values=values,
                                                                 made_up=True).graded
    for c in (2.0, 5.0):
        gc = [uniform_like(o, c * (1 + k)) for k, o in enumerate(outputs)]
        got_c = context.vjp(gc, f"with grad_output = {c:g} everywhere", values=values, made_up=values is not None)
        if expected(gc).error(got_c[i], i, shape) > 1.0:
            return False
    return True


def near_miss(context, i, got, expected, g, off):
    """Why input i's gradient, off by off (relative), is too close to call, or '' where it is not: within
    four tolerances, or within four times what TF32-rounded operands alone do to a float32 op's right
    gradient (Triton's default for a float32 tl.dot); never where an element is far off, or the error is
    a constant factor."""
    if expected.worst_element(got[i], i) or off > max(JUST_PAST, 2 * expected.tolerance[i]):
        return ""
    if systematic(got[i], expected, i) is not None:
        return ""
    tf32 = context.truth.tf32_error(g, i)
    if tf32 and off <= 4 * tf32:
        return (f"TF32 products (Triton's default for a float32 tl.dot) alone move the right gradient by {tf32:.3g}, "
                f"so the backward's own precision can explain it")
    if expected.overall(got[i], i) <= 4:
        return "the kernel's own precision (TF32 dot products, say) can explain it"
    return ""


def wrong_share(got, expected, i):
    """', 3 of 2000 elements far off' where only a few are (of the elements sampled, or of the random directions
    along which the gradient is known)."""
    far = expected.far_off(got, i)
    if far is None:
        g, want = expected.sample(got, i), expected.grads[i]
        far = (g - want).abs() > torch.maximum(want.abs() / 2, expected.tolerance[i] * want.abs().max())
    count, total = int(far.sum()), far.numel()
    if not 0 < count < total:
        return ""
    index = expected.indices[i]
    if isinstance(index, RandomDirections):
        return f"; off by half or more along {count} of the {total} random directions it was checked along"
    return f"; {count} of {total} {'sampled ' if index is not None else ''}elements far off"


# A grid or a mask that stops short leaves a gradient right on at least its first block: a prefix this long
# (and, where only a sample of the gradient is known, two sampled elements) right, and at least half of the
# elements after it wrong (the others may hold a right gradient near 0 by chance: the tail is zeros, or
# memory nothing wrote, and in a narrow dtype the tolerance is wide).
RIGHT_PREFIX = 16
TAIL_WRONG = 0.5


def stops_short(got, expected, i, parts=False):
    """'the first k of n elements of the gradient are right and the rest wrong' where input i's gradient
    is right on a prefix of at least RIGHT_PREFIX elements and wrong from there on; else ''. parts: input i is a
    complex input's real and imaginary parts side by side (complex_parts), so an element is a pair of them, wrong
    where either is (a backward that forgets a conjugate is wrong in every other part, from the first)."""
    sample = expected.sample(got, i)
    index = expected.indices[i]
    want = expected.grads[i]
    if isinstance(index, RandomDirections):  # along directions: right on the first block, wrong on the last
        wrong = {label: relative_error(sample[index.spanning(label)], want[index.spanning(label)]) >
                 expected.tolerance[i] for label in ("the first block", "the last block")}
        if index.spanning("the last block").any() and wrong["the last block"] and not wrong["the first block"]:
            return (f"the gradient is right along directions within its first block and wrong along directions "
                    f"within its last block (of {flat(got).numel()} elements)")
        return ""
    positions = torch.arange(sample.numel(), device=sample.device) if index is None else index
    rounding = expected.fine[i] if expected.fine[i] is not None else torch.zeros_like(want)
    allowed = expected.tolerance[i] * max(want.abs().max().item(), 1e-30) + ROUNDING_TIMES * rounding.to(want.device)
    bad = ~((sample - want).abs() <= allowed)
    count = flat(got).numel()
    if parts:
        positions = positions.to(bad.device) // 2
        bad_pairs = torch.zeros(count // 2 + 1, dtype=torch.bool, device=bad.device)
        bad_pairs[positions[bad]] = True
        bad, count = bad_pairs[positions], count // 2
    if not bad.any() or bad.all():
        return ""
    first_bad = positions[bad].min().item()
    right_before = int((positions < first_bad).sum())
    if first_bad < RIGHT_PREFIX or right_before < 2 or bad[positions >= first_bad].float().mean().item() < TAIL_WRONG:
        return ""
    return f"the first {first_bad} of {count} elements of the gradient are right and the rest wrong"


def stops_short_when_grown(context, i):
    """Where the given inputs are too small to show it: on the inputs grown past several blocks, input i's
    gradient right on a prefix and wrong from there on. '(shapes): the first k of n ...' or ''."""
    plans, _ = growth_plans(context.values, context.op.slots, context.op.varied)
    if not plans or context.truth is None:
        return ""
    try:
        values = grow(context.values, plans[0])
        outputs = context.run("on the inputs grown", values=values, made_up=True).graded
        g = [randn(o.shape, o, f"grown, the tail {k}", context.base) for k, o in enumerate(outputs)]
        got = context.vjp(g, "on the inputs grown", values=values, made_up=True)
        truth = Truth(context.op, values, context.reference, context.graded_positions, sample=True)
        expected = truth.expected(g)
    except OpFaulted:
        raise
    except Exception:  # noqa: BLE001  (no grown values keep the contract, or the op or the truth refuses them)
        return ""
    if got[i] is None or tuple(got[i].shape) != tuple(values[i].shape):
        return ""
    stop = stops_short(got[i], expected, i, context.op.slots[i].parts)
    if not stop or right_for_uniform(context, i, values):
        return ""
    return f"{describe_shapes(values)}, {stop}"


# The block sizes a kernel may hard-code, tried from the largest below a dimension's size down: a gradient right
# with the dimension cut to one of them, and wrong at its size, is a grid or a mask that covers one block.
BLOCKS = (4096, 2048, 1024, 512, 256, 128, 64, 32, 16, 8, 4)
# At most this many cut sizes are tried for each size (each a forward, a backward and the right gradient).
BLOCKS_TRIED = 4


def right_within_a_block(context, i, got, expected):
    """Where input i's gradient (got, against expected) is wrong at these values' sizes, its elements past a
    block along every dimension of one size far more wrong than those within it (wrong_past), and right with
    those dimensions cut to that block (a power of two below the size, the largest that is right, its values the
    given ones' first elements, jittered): 'right with every dimension of size n cut to b, wrong at n' (and at the
    block tried above b); else ''. A bug wrong at any size (a formula, a cache, a few elements anywhere) is
    never named so, whatever a smaller size shows. Sizes the checker may not change (an integer tensor's, a
    length passed beside) are never cut."""
    if i not in context.op.varied:  # a tensor a function argument reads keeps its shape
        return ""
    protected = protected_sizes(context.values, context.op.slots, context.op.varied)
    shapes = {k: tuple(context.values[k].shape) for k in context.op.varied}
    sizes = sorted({n for shape in shapes.values() for n in shape if n > BLOCKS[-1] and n not in protected},
                   reverse=True)
    for n in sizes:
        wrong_at = [n]
        for b in [b for b in BLOCKS if b < n][:BLOCKS_TRIED]:
            if not wrong_past(got[i], expected, i, [d for d, m in enumerate(shapes[i]) if m == n], b):
                continue
            plan = {(k, d): b for k, shape in shapes.items() for d, m in enumerate(shape) if m == n}
            right = right_at(context, i, plan)
            if right is None:
                break
            if right:
                above = f" and at {wrong_at[-1]}" if len(wrong_at) > 1 else ""
                return f"right with every dimension of size {n} cut to {b}, wrong at {n}{above}"
            wrong_at.append(b)
    return ""


# Past a block that a grid or a mask stops at, at least TAIL_WRONG of the elements are far off, and they are off
# by at least PAST_TIMES as much as those within it, on average (a softmax's row sum that misses the columns past
# the block moves the elements within it too, but far less).
PAST_TIMES = 4


def wrong_past(got, expected, i, dims, b):
    """Whether input i's gradient is far off on most elements past b along any of dims, and far more off there
    than within b along all of them, over the elements known (every one, or a sample); never where only its
    inner products with random directions are known."""
    index = expected.indices[i]
    if isinstance(index, RandomDirections) or not dims or got is None:
        return False
    g, want = expected.sample(got, i), expected.grads[i]
    if g.shape != want.shape:
        return False
    positions = torch.arange(got.numel(), device=want.device) if index is None else index.to(want.device)
    error = (g.to(want.device).double() - want).abs().nan_to_num(float("inf"))
    far = error > torch.maximum(want.abs() / 2, expected.tolerance[i] * want.abs().max())
    past = torch.zeros(positions.shape, dtype=torch.bool, device=want.device)
    for d in dims:
        stride = math.prod(got.shape[d + 1:])
        past |= (positions // stride) % got.shape[d] >= b
    if int(past.sum()) < 2 or int((~past).sum()) < 2:
        return False
    within = error[~past].mean().item()
    return far[past].float().mean().item() >= TAIL_WRONG and error[past].mean().item() >= PAST_TIMES * within


def right_at(context, i, plan):
    """Whether input i's gradient is right on the values cut by plan (True, False), or None where that cannot be
    judged there (the op, the contract or the truth refuses the values, or the truth is too loose)."""
    try:
        values = grow(context.values, plan)
        outputs = context.run("with a dimension cut to a block", values=values, made_up=True).graded
        g = [randn(o.shape, o, f"cut to a block {k}", context.base) for k, o in enumerate(outputs)]
        got = context.vjp(g, "with a dimension cut to a block", values=values, made_up=True)
        expected = Truth(context.op, values, context.reference, context.graded_positions, sample=True).expected(g)
    except OpFaulted:
        raise
    except Exception:  # noqa: BLE001  (no cut values keep the contract, or the op or the truth refuses them)
        return None
    if got[i] is None or tuple(got[i].shape) != tuple(values[i].shape) or context.noisy(expected, [i]):
        return None
    return expected.error(got[i], i, values[i].shape) <= 1.0


def narrowed(context, i):
    """Where backward returns input i's gradient in a narrower dtype than the input (float16 for float32,
    an integer one), what autograd's cast back cannot undo; else ''."""
    if not is_function(context.op.fn) or isinstance(context.op.slots[i].key, str):
        return ""
    returned, run = direct_backward(context)
    grad, passed = (returned[i] if i < len(returned) else None), run.passed[i]
    if not isinstance(grad, torch.Tensor) or grad.dtype == passed.dtype:
        return ""
    if grad.is_floating_point() and grad.dtype.itemsize >= passed.dtype.itemsize:
        return ""
    return (f"{context.arg(i)} is {passed.dtype}, but backward returns a {grad.dtype} gradient: autograd casts it "
            f"back, after the rounding")
