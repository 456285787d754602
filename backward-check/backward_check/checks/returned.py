"""What backward returns, called directly as autograd calls it, before autograd checks, casts, sums
or drops it (Chapter 15: one gradient per input, each like its input)."""
import torch

from ..calling import backward_method, carries_gradient
from .context import OpRaised, raised
from ..report import SUMMED_TO_SIZE, WASTED_GRADIENT, WIDER_GRADIENT, RETURNS_WRONG, Note, Passed


def direct_backward(context, frozen=()):
    """What the Function's backward (or vjp) returns, called as autograd calls it: (its values, one per
    positional input of forward or more, the run it answered)."""
    run = context.run("the forward, for backward called directly", frozen=frozen)
    g = context.randoms("backward called directly")
    node = run.graded[0].grad_fn
    backward = backward_method(context.op.fn)
    with torch.no_grad():
        try:
            returned = backward(node, *all_grad_outputs(run, g, materialize=True))
        except Exception:  # noqa: BLE001  after ctx.set_materialize_grads(False) autograd passes None instead
            try:
                returned = backward(node, *all_grad_outputs(run, g, materialize=False))
            except Exception as error:  # the op's own raise
                raise raised("backward called directly", error, frozen=context.frozen_by_checker(frozen)) from error
    return (returned if isinstance(returned, tuple) else (returned,)), run


def all_grad_outputs(run, g, materialize):
    """One grad_output per output of forward, as autograd passes them: for a tensor that carries none,
    zeros (None after ctx.set_materialize_grads(False), which ctx does not let one read back); None for
    a value that is no tensor."""
    it = iter(g)
    raw = run.raw if isinstance(run.raw, tuple) else (run.raw,)
    return [None if not isinstance(o, torch.Tensor) else next(it) if carries_gradient(o)
            else (torch.zeros_like(o) if materialize else None) for o in raw]


def expandable(grad, passed):
    """A gradient autograd sums to its input's shape (sum_to_size): the input's shape broadcasts to it."""
    try:
        return tuple(torch.broadcast_shapes(tuple(passed.shape), tuple(grad.shape))) == tuple(grad.shape)
    except RuntimeError:
        return False


def holds_every_value(dtype, like):
    """Whether a gradient of dtype can hold every value of an input of dtype like: the same dtype, or a
    floating-point one at least as wide in range and as fine in step (float32 for bfloat16; never float16 for
    bfloat16, whose range float16's 65504 cannot reach)."""
    if dtype == like:
        return True
    if not (dtype.is_floating_point and like.is_floating_point):
        return False
    wide, narrow = torch.finfo(dtype), torch.finfo(like)
    return wide.max >= narrow.max and wide.eps <= narrow.eps and wide.tiny <= narrow.tiny


def range_and_step(dtype):
    if not dtype.is_floating_point:
        return "integers"
    info = torch.finfo(dtype)
    return f"up to {info.max:.3g}, steps of {info.eps:.2g}"


def returned_gradients(context, check):
    """backward called directly, with every input wanting a gradient and with each frozen in turn: one
    value per positional input, each None or a tensor like its input."""
    outcomes = []
    inputs = context.op.inputs

    def wrong(evidence):
        return [context.finding(check, RETURNS_WRONG, evidence)]

    for frozen in [()] + ([(i,) for i in inputs] if len(inputs) > 1 else []):
        try:
            returned, run = direct_backward(context, frozen)
        except OpRaised as refusal:
            outcomes.append(context.refusal_of_frozen(check, refusal))
            continue
        positional = [s for s in context.op.slots if not isinstance(s.key, str)]
        if len(returned) > len(positional) and all(r is None for r in returned[len(positional):]):
            returned = returned[:len(positional)]  # trailing Nones: autograd drops them
        if len(returned) != len(positional):
            return wrong(f"backward returned {len(returned)} value(s) for {len(positional)} input(s) of forward")
        for i, (slot, grad, passed) in enumerate(zip(positional, returned, run.passed)):
            if grad is None:  # legal: autograd takes it as zeros, and the value checks judge that
                continue
            if not isinstance(grad, torch.Tensor):
                return wrong(f"backward returned a {type(grad).__name__} for `{slot.name}`, not a tensor or None")
            if i not in inputs or i in frozen:
                why = "it is frozen" if i in frozen else "it takes none"
                outcomes.append(Note(check, f"backward computes a gradient for `{slot.name}` when {why} "
                                            f"(ctx.needs_input_grad[{i}] is False): autograd throws it away, and "
                                            f"the work is wasted", WASTED_GRADIENT))
                continue
            moved = grad.device != passed.device and grad.dim() > 0  # autograd moves a 0-dim gradient itself
            if moved or (tuple(grad.shape) != tuple(passed.shape) and not expandable(grad, passed)):
                return wrong(f"`{slot.name}` is {tuple(passed.shape)} on {passed.device}, but its gradient is "
                             f"{tuple(grad.shape)} on {grad.device}")
            if not holds_every_value(grad.dtype, passed.dtype):
                return wrong(f"`{slot.name}` is {passed.dtype}, but backward returns a {grad.dtype} gradient for it, "
                             f"which cannot hold every {passed.dtype} value ({range_and_step(grad.dtype)}, against "
                             f"{range_and_step(passed.dtype)}): autograd casts it back, after the damage")
            if tuple(grad.shape) != tuple(passed.shape):
                outcomes.append(Note(check, f"backward returns `{slot.name}`'s gradient as {tuple(grad.shape)} for "
                                            f"an input of {tuple(passed.shape)}: autograd sums it to the input's "
                                            f"shape (legal), after the wider work", SUMMED_TO_SIZE))
            if grad.dtype != passed.dtype and grad.is_floating_point() and grad.dtype.itemsize > passed.dtype.itemsize:
                outcomes.append(Note(check, f"backward returns a {grad.dtype} gradient for `{slot.name}`, which is "
                                            f"{passed.dtype}: autograd casts it back, and the wider work and memory "
                                            f"are wasted", WIDER_GRADIENT))
    return outcomes + [Passed(check)]
