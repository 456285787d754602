"""State: one call must not depend on another (17.3: never special-case "the first time I'm called")."""
from .context import OpFaulted
from ..report import KEEPS_STATE, Passed, Undecided
from ..strategies import grow, growth_plans, jittered_inputs, randn
from .truth import TOLERANCE, Truth, flat, relative_error

# Two calls of a stateless op give the same gradient, but for the order of a nondeterministic sum
# (atomic adds): at most a few thousandths, relative, in float32. A state bug is off by far more.
STATE_FLOOR = 1e-2


def same_call_twice(context, check):
    """The same call made twice, on fresh copies: the same gradient, unless the backward depends on an
    earlier call. Every check that compares two of the op's own calls needs this to hold. The two forwards are
    those of the two calls compared (Context.repeat)."""
    one, two = context.take_repeat_outputs()
    apart = max((relative_error(flat(a), flat(b)) for a, b in zip(one, two)), default=0.0)
    if apart > context.output_tolerance():
        return [Undecided(check, f"the same forward made twice gave two outputs ({apart:.3g} apart, relative): the "
                                 f"op draws random numbers the checker cannot seed (a generator of its own), so no "
                                 f"two of its calls can be compared")]
    first, second = context.repeat
    for i in context.op.inputs:
        if (first[i] is None) != (second[i] is None):
            return [context.finding(check, KEEPS_STATE, "the same call made twice gave a gradient once and None "
                                                        "once", i)]
        apart = context.noise(i)
        if apart > max(STATE_FLOOR, TOLERANCE.get(context.values[i].dtype, 1e-4)):
            return [context.finding(check, KEEPS_STATE, f"the same call made twice gave two gradients ({apart:.3g} "
                                                        f"apart, relative)", i, ": the backward depends on an earlier "
                                                        "call, or reads memory nothing wrote (a torch.empty buffer "
                                                        "some blocks skip)")]
    return [Passed(check)]


def other_values(context):
    """The differentiable inputs jittered (the checker's own to vary), each keeping its contract; every other
    argument as given."""
    return jittered_inputs(context.values, context.op.varied, "other values", context.base)


def between_calls(context, check):
    """Calls on other values: a gradient handed back must not change at the next call (a reused
    workspace); a call on other values of the same shape must not get the first call's derivative (a
    cache keyed by shape); two calls in one graph, both forwards before either backward, must each
    give what they give alone."""
    outcomes = []
    g, b = context.randoms("between calls, first"), context.randoms("between calls, second")
    other = other_values(context)
    handed = context.vjp(g, "with a random grad_output", raw=True)
    kept = [None if t is None else t.detach().clone() for t in handed]
    alone = context.vjp(b, "on other values", values=other, made_up=True)
    for i in context.op.inputs:
        if handed[i] is not None and relative_error(flat(handed[i]), flat(kept[i])) > 0:
            outcomes.append(context.finding(check, KEEPS_STATE, "the gradient one call handed back changed when "
                                                                "the op was called again: the backward returns a "
                                                                "workspace it reuses", i))
            break
    outcomes += stale(context, check, other, b, alone)
    one = context.run("used twice in one graph", made_up=False)
    two = context.run("used twice in one graph, on other values", values=other, made_up=True)
    loss = sum((o * gk).sum() for o, gk in zip(one.graded, g)) + sum((o * bk).sum() for o, bk in zip(two.graded, b))
    got = context.grad_of(loss, one.leaves + two.leaves, "the backward, used twice in one graph")
    together = got[:len(one.leaves)], got[len(one.leaves):]
    for got_, want, which in ((together[0], kept, "x1"), (together[1], alone, "x2")):
        # an input a function argument reads is one tensor in both calls: its gradient is theirs together
        differ = context.same(got_, want, inputs=context.op.varied)
        if differ:
            i = min(differ)
            outcomes.append(context.finding(check, KEEPS_STATE, f"op(x1) and op(x2) in one graph, (op(x1) * a).sum() + "
                                                            f"(op(x2) * b).sum(): {which}'s gradient differs from the "
                                                            f"same call made alone ({differ[i]:.3g}, relative)", i,
                                            ": one call's backward used what the other call left behind"))
            break
    return outcomes or [Passed(check)]


def right_on_a_new_shape(context, i):
    """Whether input i's gradient, wrong for the given shape, behaves as a cache kept per shape would on a
    shape the op has not seen (the given values, grown): right for its first call there, and then, on
    other values of that shape, wrong. A formula wrong only for small shapes is right on both calls, and
    is no state. Needs a reference."""
    plans, _ = growth_plans(context.values, context.op.slots, context.op.varied)
    if not plans or not context.truth.by_reference:
        return False
    try:
        values = grow(context.values, plans[-1])
        others = jittered_inputs(values, context.op.varied, "a new shape, other values", context.base)
        outputs = context.run("on values of a new shape", values=values, made_up=True).graded
        g = [randn(o.shape, o, f"a new shape {k}", context.base) for k, o in enumerate(outputs)]
        first = context.vjp(g, "on values of a new shape", values=values, made_up=True)
        second = context.vjp(g, "on other values of that shape", values=others, made_up=True)
        right = [Truth(context.op, v, context.reference, context.graded_positions).expected(g)
                 for v in (values, others)]
    except OpFaulted:
        raise
    except Exception:  # noqa: BLE001  (no values keep the contract there, or the op or the reference refuses them)
        return False
    return (right[0].error(first[i], i, values[i].shape) <= 1.0 and
            right[1].error(second[i], i, others[i].shape) > 1.0)


def stale(context, check, other, b, alone):
    """A call on other values of the same shape that gets the derivative of an earlier call: its gradient
    is wrong, and lies far nearer the gradient the given values have under the same grad_output. Judged
    only with a reference (finite differences at the other values would cost a Jacobian more)."""
    if not context.truth.by_reference or not context.forward_right:
        return []
    try:
        right = Truth(context.op, other, context.reference, context.graded_positions).expected(b)
    except OpFaulted:
        raise
    except Exception as error:  # noqa: BLE001  (the reference refuses the other values: nothing to judge)
        return [Undecided(check, f"the reference refuses the other values ({type(error).__name__})")]
    earlier = None  # the given values' right gradient, asked of the reference only where a gradient is wrong
    for i in context.op.inputs:
        error = right.error(alone[i], i, context.values[i].shape)
        if error <= 1.0 or alone[i] is None:
            continue
        earlier = earlier or context.expected(b)
        nearer = earlier.raw_error(alone[i], i)
        if nearer < right.raw_error(alone[i], i) / 4:
            return [context.finding(check, KEEPS_STATE, f"a second call, on other values of the same shape, got the "
                                                        f"gradient of the first call's values "
                                                        f"({right.raw_error(alone[i], i):.3g} off its own, "
                                                        f"{nearer:.3g} off the first's, relative)", i,
                                    ": the backward uses what an earlier call left behind")]
    return []
