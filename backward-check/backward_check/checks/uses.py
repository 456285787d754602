"""Uses: the output used twice (fan-in, 17.3), an input frozen, an output left unused."""
import torch

from .context import OpRaised
from ..report import EVERY_OUTPUT_USED, RETURNS_WRONG, SINGLE_USE, Passed, Undecided


def fan_in(context, check):
    """One forward, two consumers, (z * a).sum() + (z * b).sum(): one backward call with a + b. A gradient
    right for one consumer's grad_output alone, wrong for the sum, and unlike the same backward called once
    with a + b, assumes a single use; one wrong for a alone too, or wrong alike for a + b given once, is
    the random grad_output check's to name."""
    if not context.forward_right:
        return [Undecided(check, "the forward disagrees with the reference", because="the forward")]
    a, b = context.randoms("fan-in, first consumer"), context.randoms("fan-in, second consumer")
    run = context.run("the forward, under fan-in")
    loss = sum((o * ak).sum() + (o * bk).sum() for o, ak, bk in zip(run.graded, a, b))
    got = context.grad_of(loss, run.leaves, "the backward, under fan-in")
    expected = context.expected([ak + bk for ak, bk in zip(a, b)])
    wrong = context.errors(got, expected)
    if wrong:  # only a gradient right for a alone can tell a use count (the op called again only where one is wrong)
        alone = context.vjp(a, "with the first consumer's grad_output alone")
        expected_alone = context.expected(a)
        wrong = {i: e for i, e in wrong.items()
                 if i not in context.errors(alone, expected_alone) and i not in context.noisy(expected_alone)}
    if wrong:  # a use count shows as a difference from the same backward called once with a + b
        once = context.vjp([ak + bk for ak, bk in zip(a, b)], "with the two consumers' grad_outputs summed")
        wrong = {i: e for i, e in wrong.items() if i in context.same(got, once, [i])}
    if wrong:
        i = min(wrong)
        return [context.finding(check, SINGLE_USE, f"z = op(x) used twice, (z * a).sum() + (z * b).sum(): right for "
                                                   f"a alone, but one backward call with a + b gives a gradient "
                                                   f"{expected.raw_error(got[i], i):.3g} (relative) off", i)]
    return [Passed(check)]


def frozen_inputs(context, check):
    """Each input frozen in turn (requires_grad=False): every other input's gradient must be what it is
    with every input wanting one, as the op itself gives it."""
    g = context.randoms("frozen inputs")
    everyone = context.vjp(g, "with every input wanting a gradient")
    notes = []
    for i in context.op.varied:  # not one a function argument reads: its callers pass it wanting a gradient
        try:
            got = context.vjp(g, f"with {context.arg(i)} frozen", frozen={i})
        except OpRaised as raised:
            notes.append(context.refusal_of_frozen(check, raised))
            continue
        others = [j for j in context.op.inputs if j != i]
        differ = context.same(got, everyone, others)
        if differ:
            j = min(differ)
            what = ("None, though it has one" if got[j] is None else
                    f"{differ[j]:.3g} (relative) off the one it has")
            return [context.finding(check, RETURNS_WRONG, f"with {context.arg(i)} frozen (requires_grad=False), "
                                                          f"{context.arg(j)}'s gradient is {what} with every input "
                                                          f"wanting a gradient", j, subject=False)] + notes
    return notes + [Passed(check)]


def unused_outputs(context, check):
    """Each output left out of the loss in turn: autograd hands its backward zeros for it, or None after
    ctx.set_materialize_grads(False). The gradient must be the one for a grad_output of zeros there."""
    g = context.randoms("unused outputs")
    for k in range(len(context.outputs)):
        zeros = [torch.zeros_like(t) if j == k else t for j, t in enumerate(g)]
        want = context.vjp(zeros, f"with output {k}'s grad_output zeros")
        run = context.run(f"the forward, output {k} unused")
        others = [j for j in range(len(context.outputs)) if j != k]
        try:
            got = context.grads(run, [g[j].clone() for j in others], f"the backward, output {k} unused", only=others)
        except OpRaised as raised:
            return [context.finding(check, EVERY_OUTPUT_USED, f"with output {k} unused (its grad_output zeros, or None "
                                                              f"after ctx.set_materialize_grads(False)), the backward "
                                                              f"raises: {raised.message}",
                                    error=type(raised.error).__name__)]
        differ = context.same(got, want)
        if differ:
            i = min(differ)
            return [context.finding(check, EVERY_OUTPUT_USED, f"with output {k} unused, the gradient is "
                                                              f"{differ[i]:.3g} (relative) off the one for a "
                                                              f"grad_output of zeros there", i)]
    return [Passed(check)]
