"""Strides: the layouts autograd really hands a backward (17.3), and inputs laid out transposed. Each is
judged against the op itself on the same values made contiguous, so it needs no reference."""
import torch

from ..calling import OutOfMemory, UsageError
from .context import OpRaised, largest_change
from ..report import (CONTIGUOUS_GRAD_OUTPUT, CONTIGUOUS_INPUT, LAID_OUT_LIKE_INPUT, MUTATES_GRAD_OUTPUT, REFUSED,
                     Finding, Note, Passed)
from ..strategies import input_layouts_for, layout_words, layouts_for
from .truth import flat, relative_error

# torch's words for an in-place write into a tensor whose elements share memory (a stride-0 grad_output)
SHARED_MEMORY_WRITE = "more than one element of the written-to tensor refers to a single memory location"


def layouts(context, check):
    """Each layout autograd hands on, for each output in turn, against the same values made contiguous.
    A layout that the backward writes into is a write (mutates grad_output), and its gradient is still
    judged: a backward that writes its gradient over a stride-0 grad_output has both traps; wrong
    layouts that come right when the input is laid out the same way are one cause: the backward reads
    grad_output with the input's strides."""
    failures = []  # (trap, label, evidence, input, output, the layout, the grad_outputs made contiguous)
    for k, out in enumerate(context.outputs):
        for label, g_layout in layouts_for(out, context.base):
            g = context.randoms(f"layouts, output {k}")
            g_contiguous = list(g)
            g[k], g_contiguous[k] = g_layout, g_layout.contiguous()
            strides = tuple(g_layout.stride())
            want = context.vjp(g_contiguous, f"with grad_output {label} made contiguous")
            before = g_layout.clone()
            try:
                got = context.vjp(g, f"with a grad_output {label} (strides {strides})", fresh=False)
            except OpRaised as raised:
                if SHARED_MEMORY_WRITE in str(raised.error):
                    failures.append((MUTATES_GRAD_OUTPUT, label, f"with a grad_output {label} (strides {strides}) "
                                     f"the backward raises, writing into it in place: {raised.message}", None, k,
                                     g_layout, g_contiguous))
                else:
                    failures.append((CONTIGUOUS_GRAD_OUTPUT, label, f"with a grad_output {label} (strides "
                                     f"{strides}) the backward raises: {raised.message}", None, k, g_layout,
                                     g_contiguous))
                continue
            if largest_change(before, g_layout):  # a write, and still a gradient to judge: each trap is named
                failures.append((MUTATES_GRAD_OUTPUT, label, f"with a grad_output {label} (strides {strides}) the "
                                 f"backward wrote into it", None, k, g_layout, g_contiguous))
            differ = context.same(got, want)
            if differ and wrong_when_contiguous(context, g_contiguous, want, differ):
                continue  # the random grad_output check's to name: laid out like an input given so, say
            if differ:
                i = min(differ)
                failures.append((CONTIGUOUS_GRAD_OUTPUT, label, f"{context.name(i)}with a grad_output {label} "
                                 f"(strides {strides}), the gradient is {differ[i]:.3g} (relative) off the one for "
                                 f"the same values made contiguous", i, k, g_layout, g_contiguous))
    if not failures:
        return [Passed(check)]
    wrong = [f for f in failures if f[0] is CONTIGUOUS_GRAD_OUTPUT]
    for _, label, _, found, k, g_layout, g_contiguous in wrong:
        if not g_layout.stride() or min(g_layout.stride()) == 0:
            continue
        # a raise names no input: each input shaped like the output may be the one whose strides it read with
        suspects = [found] if found is not None else [i for i in context.op.inputs
                                                      if context.values[i].shape == g_layout.shape]
        i = next((i for i in suspects if read_with_input_strides(context, i, k, g_layout, g_contiguous)), None)
        if i is not None:
            others = [f[1] for f in wrong if f[1] != label]
            also = f"; also wrong {', '.join(others)}" if others else ""
            cause = context.finding(check, LAID_OUT_LIKE_INPUT, f"wrong with a grad_output {label} and "
                                                                f"{context.arg(i)} contiguous, right when "
                                                                f"{context.arg(i)} is laid out the same way: the "
                                                                f"backward reads grad_output with {context.arg(i)}'s "
                                                                f"strides{also}", i)
            writes = [finding(check, context, failures, MUTATES_GRAD_OUTPUT)] if any(
                f[0] is MUTATES_GRAD_OUTPUT for f in failures) else []
            return [cause] + writes
    return [finding(check, context, failures, trap) for trap in dict.fromkeys(f[0] for f in failures)]


def wrong_when_contiguous(context, g, want, inputs):
    """Whether, with an input given laid out otherwise than contiguous, the gradients want for the contiguous
    grad_outputs g are already wrong for one of inputs: then a layout's answer is compared with a wrong one, and
    decides nothing (a backward that reads grad_output at the strides of an input given as `x[::2]` is right
    only for a grad_output laid out so)."""
    if all(context.values[j].is_contiguous() for j in context.op.inputs) or not context.forward_right:
        return False
    try:
        expected = context.expected(g)
    except (OpRaised, OutOfMemory, UsageError):
        return False
    return any(expected.error(want[i], i, context.values[i].shape) > 1.0 for i in inputs)


def finding(check, context, failures, trap):
    """One finding for trap: the first layout's evidence, and the other layouts that show it."""
    mine = [f for f in failures if f[0] is trap]
    also = f"; also {', '.join(f[1] for f in mine[1:])}" if len(mine) > 1 else ""
    return context.finding(check, trap, mine[0][2] + also,
                           input=context.arg(mine[0][3]) if mine[0][3] is not None else None)


def laid_out_as(x, like):
    """x's values, laid out with like's strides (like's elements each in memory of its own), any gaps
    between them NaN."""
    out = torch.empty_strided(tuple(like.shape), like.stride(), dtype=x.dtype, device=x.device)
    if out.is_floating_point():
        out.as_strided((out.untyped_storage().nbytes() // out.element_size(),), (1,), 0).fill_(float("nan"))
    return out.copy_(x)


def read_with_input_strides(context, i, k, g_layout, g_contiguous):
    """Right when the input is laid out as grad_output is: the backward reads grad_output with x's strides."""
    x = context.values[i]
    if x.shape != context.outputs[k].shape or x.shape != g_layout.shape:
        return False
    values = list(context.values)
    values[i] = laid_out_as(x, g_layout)
    g = list(g_contiguous)
    g[k] = laid_out_as(g_contiguous[k], g_layout)
    want = context.vjp(g_contiguous, "with contiguous x and grad_output")
    try:
        both = context.vjp(g, "with x and grad_output laid out alike", values=values, fresh=False, made_up=True)
    except (OpRaised, OutOfMemory):
        return False
    return not context.same(both, want, [i])


def reads_grad_output_like(context, i, laid, g):
    """Whether the backward, wrong with input i laid out as laid and grad_output contiguous, is right with
    grad_output laid out the same way: it reads grad_output with i's strides."""
    return (context.values[i].shape == context.outputs[0].shape
            and read_with_input_strides(context, i, 0, laid, [t.clone() for t in g]))


def other_input_layouts(context, check):
    """Each input laid out otherwise, with the same values: transposed (two or more dims), and as a padded
    view whose gaps hold NaN (`qkv[:, :d]`, or `x[::2]` for one dim). The forward and the gradients must be
    what they are for the contiguous input. Refusing the layout, loudly, is legal."""
    outcomes = []
    g = context.randoms("transposed inputs")
    for i in context.op.varied:  # not one a function argument reads: its layout is the function's
        for label, laid in input_layouts_for(context.values[i]):
            outcome = one_input_layout(context, check, g, i, label, laid)
            if outcome is not None:
                outcomes.append(outcome)
                if isinstance(outcome, Finding):
                    break  # one finding an input: its other layouts would say the same
    return outcomes or [Passed(check)]


def one_input_layout(context, check, g, i, label, laid):
    """input i laid out as laid (label says how): a Note where the op refuses it, a Finding where the op
    gets it wrong, None where it is right. The finding names the input whose layout decides it, laid out how,
    and each gradient it changed, by how much."""
    values = list(context.values)
    values[i] = laid
    how = layout_words(label, laid, context.op.slots[i].name)
    want = context.run("with contiguous inputs")
    try:
        run = context.run(f"with {context.arg(i)} {how}", values=values, made_up=True)
    except OpRaised as raised:
        return Note(check, f"refuses {context.arg(i)} {how} ({raised.message})", REFUSED)
    off = max((relative_error(flat(a), flat(b)) for a, b in zip(run.graded, want.graded)), default=0.0)
    if off > context.output_tolerance():
        return context.finding(check, CONTIGUOUS_INPUT, f"with {context.arg(i)} {how} and the same values, the "
                                                        f"forward's output is {off:.3g} (relative) off", i,
                               subject=False)
    ref = context.grads(want, [t.clone() for t in g], "the backward, with contiguous inputs")
    try:
        got = context.grads(run, [t.clone() for t in g], f"the backward, with {context.arg(i)} {how}")
    except OpRaised as raised:
        if reads_grad_output_like(context, i, laid, g):
            return context.finding(check, LAID_OUT_LIKE_INPUT, f"with {context.arg(i)} {how} and grad_output "
                                                               f"contiguous the backward raises ({raised.message}), "
                                                               f"and is right when grad_output is laid out the same "
                                                               f"way: the backward reads grad_output with "
                                                               f"{context.arg(i)}'s strides", i)
        return context.finding(check, CONTIGUOUS_INPUT, f"the forward takes {context.arg(i)} {how}, and the "
                                                        f"backward takes it contiguous, but raises for it so: "
                                                        f"{raised.message}", i, subject=False,
                               error=type(raised.error).__name__)
    differ = context.same(got, ref)
    if not differ:
        return None
    if reads_grad_output_like(context, i, laid, g):
        return context.finding(check, LAID_OUT_LIKE_INPUT, f"wrong with {context.arg(i)} {how} and grad_output "
                                                           f"contiguous, right when grad_output is laid out the same "
                                                           f"way: the backward reads grad_output with "
                                                           f"{context.arg(i)}'s strides", i)
    changed = "; ".join(how_changed(context, i, j, got[j], ref[j], differ[j]) for j in sorted(differ))
    reads = f"the saved {context.arg(i)}" if set(differ) == {i} else context.arg(i)
    return context.finding(check, CONTIGUOUS_INPUT, f"with {context.arg(i)} {how} and the same values, the forward "
                                                    f"is right but {changed}, against the same call with "
                                                    f"{context.arg(i)} contiguous: the backward reads {reads} as if "
                                                    f"contiguous", i, subject=False)


def how_changed(context, i, j, got, ref, difference):
    """How input j's gradient changed with input i laid out otherwise: by how much (relative), or, where it took
    in the NaN of i's gaps, in how many elements."""
    if got is not None and got.shape == ref.shape:
        spoiled = ~got.isfinite() & ref.isfinite()
        if bool(spoiled.any()):
            return (f"{context.arg(j)}'s gradient is NaN or infinite in {int(spoiled.sum())} of {got.numel()} elements "
                    f"(the NaN between {context.arg(i)}'s elements)")
    return f"{context.arg(j)}'s gradient is {difference:.3g} (relative) off"
