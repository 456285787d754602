"""Writes: the forward and the backward must leave what they are handed alone (17.3: another consumer
of the same tensor reads it too), and a backward may not change what it saved."""
import torch

from ..calling import carries_gradient, clip, flatten, seeded_call, seeded_grad
from .context import OpRaised, frozen_sets, largest_change, reraise_fault
from ..report import BUFFER_UPDATED, KEEPS_STATE, MUTATES_GRAD_OUTPUT, WRITES, Finding, Note, Passed
from .truth import flat


def passed_unless_found(check, outcomes):
    """outcomes, and the check passed where none of them is a finding (a note alone is legal)."""
    return outcomes if any(isinstance(o, Finding) for o in outcomes) else outcomes + [Passed(check)]


def frozen_words(context, frozen):
    return f" with {context.arg(frozen[0])} frozen (requires_grad=False)" if frozen else ""


def buffer_note(check, context, i, change, when):
    return Note(check, f"{when} updates {context.arg(i)} in place (largest change {change:.3g}), an argument it "
                       f"takes no gradient for: legal for a buffer (a running statistic), but the caller's "
                       f"tensor changes", BUFFER_UPDATED)


def forward_writes(context, check):
    """The forward, with every input wanting a gradient and with each frozen in turn: did it change an
    argument it did not declare (ctx.mark_dirty returns the very tensor)? Then a sibling that saved
    the same tensor shows the damage."""
    seen, outcomes = set(), []
    for frozen in frozen_sets(context):
        try:
            run = context.run("the forward" + frozen_words(context, frozen), frozen=frozen)
        except OpRaised as raised:
            outcomes.append(context.refusal_of_frozen(check, raised))
            continue
        for i, (given, passed) in enumerate(zip(context.values, run.passed)):
            if not isinstance(given, torch.Tensor) or i in seen:
                continue
            change = largest_change(given.to(passed.dtype), passed.detach())
            if not change or any(o is passed for o in run.outputs):
                continue
            seen.add(i)
            if i not in context.op.inputs:
                outcomes.append(buffer_note(check, context, i, change, "the forward"))
                continue
            outcomes.append(context.finding(check, WRITES, f"the forward changed {context.arg(i)}"
                                                           f"{frozen_words(context, frozen)} (largest change "
                                                           f"{change:.3g}) and did not declare it (ctx.mark_dirty)",
                                            i, f"; {harm(context, i)}", subject=False))
    return passed_unless_found(check, outcomes)


def harm(context, i):
    """The sibling a write into input i hurts: (h * h * w).sum() beside the op saves h for its backward.
    Its gradient is 2 h w, whatever the op does, so h's gradient must be the op's own (from a call made
    alone) plus 2 h w."""
    w = context.draw("the sibling of a write", context.values[i])
    g = context.randoms("the sibling of a write, grad_output")
    alone = context.vjp(g, "the backward, alone")[i]
    leaves, passed = context.op.fresh(values=context.values)
    h = passed[i]
    sibling = (h * h * w).sum()
    outs = [o for o in flatten(seeded_call(context.op, passed)) if carries_gradient(o)]
    loss = sum((o * gk).sum() for o, gk in zip(outs, g)) + sibling
    try:
        got, = seeded_grad(loss, [leaves[i]], allow_unused=True, drew=context.drew)
    except RuntimeError as error:  # autograd's version counter saw it: a write through torch, not a kernel
        return f"autograd refuses the sibling's backward ({clip(error, 90)})"
    want = flat(2 * context.values[i].double() * w.double()) + (0 if alone is None else flat(alone))
    off = float("inf") if got is None else (want - flat(got)).abs().max().item()
    return (f"beside it, (h * h * w).sum() saved h for its backward, and the input's gradient there is off by "
            f"up to {off:.3g}")


def backward_writes(context, check):
    """The backward, with every input wanting a gradient and with each frozen in turn: did it change
    grad_output, an argument, or an output the caller holds?"""
    outcomes, seen = [], set()
    for frozen in frozen_sets(context):
        if not set(context.op.inputs) - set(frozen):
            continue
        g = context.randoms("backward writes")
        kept = [t.clone() for t in g]
        try:
            run = context.run("the forward" + frozen_words(context, frozen), frozen=frozen)
            after_forward = [p.detach().clone() if isinstance(p, torch.Tensor) else None for p in run.passed]
            outputs = [o.detach().clone() for o in run.outputs]
            context.grads(run, g, "the backward, with a random grad_output" + frozen_words(context, frozen))
        except OpRaised as raised:
            outcomes.append(context.refusal_of_frozen(check, raised))
            continue
        change = max(largest_change(a, b) for a, b in zip(kept, g))
        if change and "grad_output" not in seen:
            seen.add("grad_output")
            outcomes.append(context.finding(check, MUTATES_GRAD_OUTPUT, f"grad_output changed during the "
                                                                        f"backward (largest change {change:.3g})"
                                                                        f"{frozen_words(context, frozen)}",
                                            then=f"; {sibling(context)}"))
        for i, (before, now) in enumerate(zip(after_forward, run.passed)):
            if before is None or i in seen:
                continue
            change = largest_change(before, now.detach())
            if not change:
                continue
            seen.add(i)
            if i not in context.op.inputs:
                outcomes.append(buffer_note(check, context, i, change, "the backward"))
                continue
            outcomes.append(context.finding(check, WRITES, f"the backward changed {context.arg(i)}"
                                                           f"{frozen_words(context, frozen)} (largest change "
                                                           f"{change:.3g}): the caller's tensor, and any other node "
                                                           f"that saved it, now hold other values", i, subject=False))
        for k, (before, now) in enumerate(zip(outputs, run.outputs)):
            change = largest_change(before, now.detach())
            if change and ("output", k) not in seen:
                seen.add(("output", k))
                outcomes.append(context.finding(check, WRITES, f"the backward changed output {k} (largest change "
                                                               f"{change:.3g}), which the caller holds"))
    return passed_unless_found(check, outcomes)


def sibling(context):
    """((op(x) + y) * w).sum(), the op made last so its backward runs first: y.grad must be w exactly."""
    out = context.outputs[0]
    y = torch.zeros_like(out).requires_grad_(True)
    w = context.draw("the sibling of grad_output", out)
    branch = y * 1.0  # made before the op, so the engine runs the op's backward first
    run = context.run("the forward, beside a sibling")
    loss = ((run.graded[0] + branch) * w).sum() + sum((o * 0).sum() for o in run.graded[1:])
    wanted = [y] + [x for x in run.leaves if x is not None]  # the op's backward must run too
    try:
        grad_y = seeded_grad(loss, wanted, allow_unused=True, drew=context.drew)[0]
    except Exception as error:  # noqa: BLE001  (a write into a stride-0 grad_output raises, say)
        reraise_fault("the backward, beside a sibling", error)
        return f"beside it, ((op(x) + y) * w).sum() raises ({clip(f'{type(error).__name__}: {error}', 90)})"
    off = (grad_y - w).abs().max().item()
    return f"beside it, in ((op(x) + y) * w).sum(), y.grad must equal w but is off by up to {off:.3g}"


def twice_over_one_graph(context, check):
    """loss.backward(retain_graph=True), twice: the second call must give what the first gave, so the
    backward may not change what it saved (a saved gradient scaled in place, say)."""
    g = context.randoms("backward twice over one graph")
    run = context.run("the forward, for backward twice over one graph")
    node = run.graded[0].grad_fn
    saved = [None if t is None else t.detach().clone() for t in getattr(node, "saved_tensors", ()) or ()]
    once = context.grads(run, [t.clone() for t in g], "the backward, with retain_graph=True", retain_graph=True)
    try:
        again = run.grad([t.clone() for t in g], retain_graph=True, drew=context.drew)  # kept, to read what it saved
    except Exception as error:  # noqa: BLE001  (refusing a second backward, loudly, is legal)
        reraise_fault("the second backward over one graph", error)
        if "modified by an inplace operation" in str(error):  # autograd's version counter caught a write
            return [context.finding(check, WRITES, f"a second backward over one graph (retain_graph=True) is refused: "
                                                   f"{clip(error, 120)}: the first backward wrote into a tensor it "
                                                   f"saved")]
        return [Note(check, f"backward cannot run twice over one graph (retain_graph=True): "
                            f"{clip(f'{type(error).__name__}: {error}', 100)}")]
    changed = [k for k, (before, now) in enumerate(zip(saved, getattr(node, "saved_tensors", ()) or ()))
               if before is not None and now is not None and largest_change(before, now.detach())]
    differ = context.same(once, again)
    if changed:
        k = changed[0]
        apart = (f", so backward run twice over one graph (retain_graph=True) gives another gradient the second "
                 f"time ({differ[min(differ)]:.3g} apart, relative)") if differ else ""
        return [context.finding(check, WRITES, f"the backward changed saved tensor {k} (ctx.saved_tensors[{k}])"
                                               f"{apart}")]
    if differ:
        i = min(differ)
        return [context.finding(check, KEEPS_STATE, f"backward run twice over one graph (retain_graph=True) gave "
                                                    f"two gradients ({differ[i]:.3g} apart, relative)", i,
                                    ": it changes what it kept on ctx")]
    return [Passed(check)]

