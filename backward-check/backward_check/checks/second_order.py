"""create_graph=True: refuse loudly, or be right (Chapter 16: a kernel's output carries no graph)."""
import torch

from ..calling import forward, seeded_grad
from .context import raised, reraise_fault
from ..report import SECOND_ORDER, Passed, Undecided
from .truth import TOLERANCE, flat, relative_error


def penalty(context, fn, g, dtype=None):
    """The gradient of |dL/dx|^2 (a gradient penalty) through fn (the op where None), or None where the
    first gradient carries no graph at all."""
    run = forward(context.op, fn=fn, dtype=dtype, values=context.values)
    wanted = [x for x in run.leaves if x is not None]
    first = seeded_grad(run.graded, wanted, [t.to(o.dtype) for t, o in zip(g, run.graded)],
                                create_graph=True, allow_unused=True)
    first = [d for d in first if d is not None and d.requires_grad]
    if not first:
        return None
    grads = seeded_grad(sum((d ** 2).sum() for d in first), wanted, allow_unused=True)
    return [torch.zeros_like(x) if p is None else p for x, p in zip(wanted, grads)]


def second_order(context, check):
    g = context.randoms("create_graph=True")
    try:
        got = penalty(context, None, g)
    except RuntimeError as error:  # refused: the safe answer (unless it is a fault that lost the GPU)
        reraise_fault("under create_graph=True", error)
        return [Passed(check)]
    except Exception as error:  # any other raise is the op's, under create_graph=True
        raise raised("under create_graph=True", error) from error
    if context.reference is None:
        what = ("the gradient carries no graph, which is right only for an op linear in its inputs" if got is None
                else "the gradient carries a graph, and nothing here says whether it is the right one")
        return [Undecided(check, f"with create_graph=True {what}: pass a reference to decide")]
    try:
        try:
            want = penalty(context, context.reference, g, dtype=torch.float64)
        except Exception:  # noqa: BLE001  (a reference that takes only its own dtype)
            want = penalty(context, context.reference, g)
    except Exception as error:  # noqa: BLE001  (the reference has no double backward of its own)
        return [Undecided(check, f"the reference's own double backward raises ({type(error).__name__}), so there is "
                                 f"nothing to judge the op's by")]
    if got is None:  # a constant gradient: right only if the op is linear in its inputs
        if want is None or not any(bool(w.any()) for w in want):
            return [Passed(check)]
        return [context.finding(check, SECOND_ORDER, "with create_graph=True the gradient came back as a constant "
                                                     "(it carries no graph) and nothing was raised: a gradient penalty "
                                                     "built on it silently contributes nothing")]
    if want is None:
        want = [torch.zeros_like(a) for a in got]
    errors = [relative_error(flat(a), flat(b).to(a.device)) for a, b in zip(got, want)]
    allowed = max(1e-3, 10 * max(TOLERANCE.get(a.dtype, 1e-4) for a in got))
    if max(errors, default=0.0) > allowed:
        return [context.finding(check, SECOND_ORDER, f"the gradient of |dL/dx|^2 (a gradient penalty) is "
                                                     f"{max(errors):.3g} (relative) off, and nothing was raised: the "
                                                     f"backward's output carries no graph, or a wrong one")]
    return [Passed(check)]
