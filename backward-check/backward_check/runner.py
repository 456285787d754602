"""The runner: every check in order, with the traps it may report and its skip rules, as data; the one
place where a crash is caught; the sets of inputs (the given ones, then the same grown).

Each check is a function check(context, name) -> [outcomes] in the module of its family (writes,
state, values, strides, uses, returned, second_order). It makes every call through the context, on
fresh copies, so it runs alone: no check reads another's result. The only link between checks is
undecided_after below: a check whose comparison another check's finding makes meaningless (two calls
of an op that disagrees with itself decide nothing) says so, as an Undecided line, instead of judging.
A finding never stops a check that looks for a different trap.

Adding a check: write the function, add a Check row to CHECKS (its traps, what it needs, the sets of
inputs it runs on, what leaves it undecided), and a zoo case that it finds (tests/checker_zoo_planted.py)
and one legal case near it that must stay clean (tests/checker_zoo.py). Adding a trap: see report.py.
"""
import dataclasses
import os

import torch

from .checks import compiled, returned, second_order, state, strides, uses, values, writes
from .backend import TOO_LATE
from .calling import (REFERENCE_CALL, ComplexOutputs, OutOfMemory, UsageError, clip, is_function,
                      out_of_memory)
from .checks.context import DIFFERENCED, FAULT_WORDS, Context, OpFaulted, OpRaised
from .checks.truth import FORWARD_WRONG, WHOLE_DIRECTIONS, Truth
from .contracts import Unkept, found, remembered
from .report import (CONTRACT, COVERS_PART, CRASHES, DRAWS_IN_BACKWARD, EVERY_OUTPUT_USED, IGNORES_GRAD_OUTPUT,
                     KEEPS_STATE, LAID_OUT_LIKE_INPUT, MADE_PER_CALL, CONTIGUOUS_GRAD_OUTPUT, CONTIGUOUS_INPUT,
                     MUTATES_GRAD_OUTPUT, NOT_GROWN, REFUSED, RETURNS_WRONG,
                     SECOND_ORDER, SINGLE_USE, UNIFORM_GRAD_OUTPUT, WRITES, WRONG_FORMULA, WRONG_FORWARD,
                     WRONG_UNDER_COMPILE, Finding, Note, Passed, Undecided)
from .strategies import describe_shapes, grow, growth_plans, slice_plan, sliced

GIVEN, GROWN, SLICED = "given", "grown", "sliced"


@dataclasses.dataclass(frozen=True)
class Check:
    name: str                   # as the report's ok line and Undecided lines name it
    run: object                 # run(context, name) -> [Finding | Note | Undecided | Passed]
    traps: tuple                # the traps it may report (besides a raise autograd itself words)
    what: str                   # what it does, in one line (docs/practice.md's list of checks)
    needs: tuple = ()           # "reference", "function", "two inputs", "two outputs", "second order"
    sets: tuple = (GIVEN, GROWN)
    undecided_after: tuple = ()  # checks whose finding leaves this one nothing to decide by


SAME_CALL = "the same call twice"
FORWARD = "the forward"
RANDOM = "random grad_output"
ONE_GRAPH_TWICE = "backward twice over one graph"

# Why a check cannot decide after another's finding, by that other check.
UNDECIDED_BECAUSE = {
    SAME_CALL: "the op does not agree with itself between identical calls, so comparing two of its calls decides "
               "nothing",
}

CHECKS = (
    Check(FORWARD, values.the_forward, (WRONG_FORWARD, COVERS_PART, CONTIGUOUS_INPUT),
          "the forward's outputs against the reference's", needs=("reference",)),
    Check(SAME_CALL, state.same_call_twice, (KEEPS_STATE,),
          "the same call made twice, on fresh copies, must give the same gradient"),
    Check("writes in the forward", writes.forward_writes, (WRITES,),
          "the forward, with every input wanting a gradient and each frozen in turn, must not change an argument "
          "it does not declare (ctx.mark_dirty); a sibling that saved the same tensor shows the damage"),
    Check(RANDOM, values.random_grad_output,
          (IGNORES_GRAD_OUTPUT, UNIFORM_GRAD_OUTPUT, WRONG_FORMULA, RETURNS_WRONG, COVERS_PART, KEEPS_STATE,
           LAID_OUT_LIKE_INPUT),
          "a random grad_output against the right gradient, input by input; a wrong one diagnosed: grad_output laid "
          "out like an input given laid out otherwise, grad_output = 1, each output's grad_output alone, 2 and 5 "
          "everywhere, a shape the op has not seen", undecided_after=(SAME_CALL,)),
    Check("writes in the backward", writes.backward_writes, (MUTATES_GRAD_OUTPUT, WRITES),
          "the backward, with every input wanting a gradient and each frozen in turn, must leave grad_output, the "
          "arguments and the outputs alone"),
    Check(ONE_GRAPH_TWICE, writes.twice_over_one_graph, (WRITES, KEEPS_STATE),
          "backward twice with retain_graph=True gives the same gradient, and leaves what it saved alone",
          sets=(GIVEN,)),
    Check("state between calls", state.between_calls, (KEEPS_STATE,),
          "a gradient handed back survives the next call; a call on other values gets its own derivative; two calls "
          "in one graph each give what they give alone", sets=(GIVEN,), undecided_after=(SAME_CALL,)),
    Check("the layouts autograd hands on", strides.layouts, (CONTIGUOUS_GRAD_OUTPUT, LAID_OUT_LIKE_INPUT,
                                                             MUTATES_GRAD_OUTPUT),
          "each grad_output layout autograd hands on (after a transpose, torch.cat, torch.stack of 1-D tensors, "
          ".sum(dim=0), .sum(dim=-1), .sum()) against the same values made contiguous", undecided_after=(SAME_CALL,)),
    Check("inputs laid out otherwise", strides.other_input_layouts, (CONTIGUOUS_INPUT, LAID_OUT_LIKE_INPUT),
          "each input laid out transposed, and as a padded view whose gaps hold NaN (`x[:, :d]`, `x[::2]`), with "
          "the same values: the same outputs and gradients", sets=(GIVEN,), undecided_after=(SAME_CALL,)),
    Check("fan-in", uses.fan_in, (SINGLE_USE,),
          "(z * a).sum() + (z * b).sum(): one backward call with a + b, and the right gradient for it (autograd "
          "sums before the call, so only a backward that depends on grad_output's size can fail it)",
          sets=(GIVEN,), undecided_after=(SAME_CALL,)),
    Check("each input frozen in turn", uses.frozen_inputs, (RETURNS_WRONG,),
          "with one input frozen (requires_grad=False), the others' gradients unchanged",
          needs=("two inputs",), sets=(GIVEN,), undecided_after=(SAME_CALL,)),
    Check("an output left unused", uses.unused_outputs, (EVERY_OUTPUT_USED,),
          "each output left out of the loss (a grad_output of zeros, or None after set_materialize_grads(False))",
          needs=("two outputs",), sets=(GIVEN,), undecided_after=(SAME_CALL,)),
    Check("what backward returns", returned.returned_gradients, (RETURNS_WRONG,),
          "backward called directly, as autograd calls it: one value per input, each None or shaped like it",
          needs=("function",), sets=(GIVEN,)),
    Check("create_graph=True", second_order.second_order, (SECOND_ORDER,),
          "a gradient penalty through the backward: refused loudly, or right", needs=("second order",), sets=(GIVEN,)),
    Check("torch.library.opcheck", compiled.opcheck, (WRONG_UNDER_COMPILE,),
          "a torch.library custom op through opcheck's checks (its schema, its autograd registration, its fake "
          "implementation, AOTAutograd's trace), each failure in the checker's words",
          needs=("compile", "custom op"), sets=(GIVEN,)),
    Check("under torch.compile", compiled.under_compile, (WRONG_UNDER_COMPILE,),
          "the op compiled (fullgraph=True where it can be) against itself eagerly: its forward, and its gradients "
          "under a random grad_output, each layout autograd hands on, two consumers inside the compiled function, "
          "and one tensor passed as two inputs", needs=("compile",), sets=(GIVEN,),
          undecided_after=(SAME_CALL,)),
)


# On an input of strategies.SLICE_FROM elements or more, the checks run whole: where a size can change what the op
# does (a grid that stops short, a buffer some blocks skip, a path taken past a size), and what every comparison of
# the op's calls needs (the same call twice). The others run on a slice of the given values (strategies.slice_plan).
WHOLE = ("the forward", SAME_CALL, "writes in the forward", RANDOM, "writes in the backward")
# Without a reference, the whole's finite differences go along fewer random directions (truth.WHOLE_DIRECTIONS), for
# what its size can change; where they find nothing, these run again on the slice, along every direction.
AGAIN_ON_A_SLICE = (RANDOM,)


def applies(check, context, options):
    needs = {"reference": context.reference is not None, "function": is_function(context.op.fn),
             "two inputs": len(context.op.inputs) > 1, "two outputs": len(context.outputs) > 1,
             "second order": options.get("second_order", False), "compile": options.get("compile") is not None,
             "custom op": compiled.custom_op_of(context.op.fn) is not None}
    label = GIVEN if context.label == SLICED else context.label  # a slice stands for the given inputs
    return label in check.sets and all(needs[n] for n in check.needs)


# What Triton says when it was imported before the backend could switch its interpreter on, on a machine
# without a GPU: a launch finds no driver, or a kernel defined then is not one the interpreter can run.
TOO_EARLY = ("0 active drivers", "Cannot call @triton.jit'd outside of the scope of a kernel")


def too_early(raised):
    """A usage error, not the op's crash, where triton was imported before this package chose its backend."""
    if TOO_LATE and any(m in raised.message for m in TOO_EARLY):
        raise UsageError("triton was imported before the checker chose its backend, so it found no GPU and no "
                         "interpreter: import backward_check (or backward_checker) before anything imports triton, "
                         "or set TRITON_INTERPRET=1 before Python starts") from None


LOST = "the GPU context is lost"
NO_ROOM = "out of memory"


def called(what, where=""):
    """Where a call found no room: the reference's own call, or the op's (what the checker was doing)."""
    return f"a call of {what}{where}" if what == REFERENCE_CALL else f"a call of the op ({what}{where})"


def no_room(check, what, message):
    """Undecided, for a check whose call of the op (or the checker's own work) found no memory left: the suite's
    call had room, so the op did not crash; the checker's copies beside it took the room, and nothing is decided."""
    return Undecided(check, f"out of memory in {what} ({message}): the checker's copies of the inputs and gradients "
                            f"beside the op's own left no room, so nothing is decided here; check the op at a smaller "
                            f"size of the same shapes, or with less else on the device", because=NO_ROOM)


def device_lost(device):
    """Whether the op's device no longer answers (a fault of the op's left its context unusable)."""
    if device is None or device.type != "cuda":
        return False
    try:
        (torch.ones(1, device=device) + 1).item()
        torch.cuda.synchronize(device)
        return False
    except Exception:  # noqa: BLE001  (any failure of a one-element add is the context's)
        return True


def op_device(context):
    tensors = [v for v in context.values if isinstance(v, torch.Tensor)]
    return tensors[0].device if tensors else None


def attempt(check, context):
    """The check's outcomes, and the one place a raise becomes one: the op's raise on the caller's values
    is a finding (the trap the call site names), on values the checker made up a note, and the
    checker's own failure an Undecided line asking for a report (BACKWARD_CHECK_DEBUG=1 raises it)."""
    try:
        outcomes = list(check.run(context, check.name))
    except UsageError:
        raise
    except Unkept as unkept:
        return [Undecided(check.name, unkept_words(context, unkept, "so this check decides nothing"))]
    except OutOfMemory as oom:
        return [no_room(check.name, called(oom.what, context.where()), oom.message)]
    except OpFaulted as fault:
        return [context.finding(check.name, CRASHES, f"the op faulted the GPU {fault.what}",
                                then=f": {fault.message}; {LOST}, so no later check in this process can run (the "
                                     f"pytest plugin runs each op's checks in a process of its own)",
                                error=type(fault.error).__name__)]
    except OpRaised as raised:
        too_early(raised)
        message = raised.message
        if "0 active drivers" in message:
            message += " (it calls a GPU-only Triton API, which the interpreter lacks: check it on a GPU)"
        if raised.frozen:
            return [context.refusal_of_frozen(check.name, raised)]
        if raised.what == DIFFERENCED:
            return [Undecided(check.name, f"finite differences need the op on nudged values, and it refuses them "
                                          f"({message}): pass a reference")]
        if raised.made_up:
            return [Note(check.name, f"refuses the values the checker made up {raised.what} ({message})", REFUSED)]
        return [context.finding(check.name, raised.trap, f"{raised.what}: {message}",
                                error=type(raised.error).__name__)]
    except Exception as error:  # the checker's own failure: never a traceback, never a verdict
        if out_of_memory(error):  # the checker's own copies found no room: not its fault, nor the op's
            return [no_room(check.name, "the checker's own work" + context.where(), clip(error, 120))]
        if any(word in str(error) for word in FAULT_WORDS) or device_lost(op_device(context)):
            return [Undecided(check.name, f"{LOST} (a fault of the op's, in an earlier call, or in this check's: "
                                          f"{clip(error, 120)}), so this check could not run", because=LOST)]
        if os.environ.get("BACKWARD_CHECK_DEBUG"):
            raise
        return [Undecided(check.name, f"the checker itself failed here ({type(error).__name__}: {clip(error, 120)}); "
                                      f"please report it (BACKWARD_CHECK_DEBUG=1 shows where)")]
    strays = [o for o in outcomes if isinstance(o, Finding) and o.trap not in check.traps + (CRASHES, RETURNS_WRONG)]
    if strays:
        raise AssertionError(f"check {check.name!r} reported {strays[0].trap.name!r}, which is not in its traps")
    return outcomes


def unkept_words(context, unkept, so):
    """Why values the checker would make up cannot be made: the input, and the property its given values hold
    that no made-up values could keep."""
    which = context.arg(unkept.where) if unkept.where is not None else "an input"
    return (f"the checker could not make values of {which} that keep what the given ones hold: "
            f"{', '.join(unkept.lost)}; {so}")


def contract_notes(context):
    """A note for each input whose values' contract changes what the checker makes up or compares."""
    contracts = {i: found(context.values[i]) for i in context.op.inputs}
    return [Note("the values' contract", c.describe(context.arg(i)), CONTRACT) for i, c in contracts.items() if c.noted]


def run_set(context, options, checks=None, found_by=None, before=()):
    """Every check that applies to this set of inputs, in order, each on its own (of checks, where given: the
    others are checked elsewhere). found_by: the checks that found something so far, for this set and any set
    these inputs stand beside (a slice's); before: what those found."""
    outcomes, found_by = [], set() if found_by is None else found_by
    for check in CHECKS:
        if not applies(check, context, options) or (checks is not None and check.name not in checks):
            continue
        if (any(isinstance(o, Finding) and o.trap is CRASHES and LOST in o.evidence for o in [*before, *outcomes])
                or any(isinstance(o, Undecided) and o.because == LOST for o in [*before, *outcomes])):
            outcomes.append(Undecided(check.name, f"{LOST} after the op's fault, so this check could not run",
                                      because=LOST))
            continue
        blocker = next((c for c in check.undecided_after if c in found_by), None)
        if blocker:
            outcomes.append(Undecided(check.name, UNDECIDED_BECAUSE[blocker] + context.where(), because=blocker))
            continue
        got = attempt(check, context)
        if any((isinstance(o, Finding) and o.trap in check.traps) or (isinstance(o, Undecided) and not o.because)
               for o in got):  # its own finding or its own doubt, not a raise
            found_by.add(check.name)
        outcomes += got
    return outcomes


# The traps a comparison of gradients names: a backward that samples by design answers with its draws, which land
# elsewhere for another layout or another order of calls, so none of them is a verdict on it, and each is said as
# what it is. Writes, raises, what backward returns and the forward are judged as ever.
SAMPLED = (WRONG_FORMULA, IGNORES_GRAD_OUTPUT, UNIFORM_GRAD_OUTPUT, SINGLE_USE, KEEPS_STATE, COVERS_PART,
           CONTIGUOUS_GRAD_OUTPUT, LAID_OUT_LIKE_INPUT, CONTIGUOUS_INPUT)


def drawn(outcomes, contexts):
    """outcomes, where a backward of the op drew random numbers (in any context): a note that says so, and each
    finding of a gradient compared (SAMPLED) said as a sample's distance, undecided: the checker seeds every call
    alike, so two calls it compares draw alike, but a sampled gradient is not a derivative to hold to a truth, nor
    one call in a graph to the same call alone (their draws come in another order)."""
    if not any(c.drew for c in contexts):
        return outcomes
    note = Note("random draws", "the backward draws random numbers (torch's generator moved in it): every call the "
                                "checker compares was seeded alike, and the gradients it returns are the draws' own",
                DRAWS_IN_BACKWARD)
    said = [Undecided(o.check, f"the backward draws random numbers, so its gradient is a sample, which this "
                               f"comparison cannot judge (it found: {o.evidence})")
            if isinstance(o, Finding) and o.trap in SAMPLED else o for o in outcomes]
    return [note] + said


def per_call(outcomes):
    """outcomes, for a class its callers make afresh for every call: each 'keeps state between calls' found
    across calls a note, since the checker applied one class object several times, which no caller does. Two
    backwards over one call's graph are one class object's in any caller's hands too, and stay a trap."""
    return [Note(o.check, f"one class object applied more than once: {o.evidence}; its callers make the class "
                          f"afresh for every call, so no call of theirs can meet what another left behind",
                 MADE_PER_CALL)
            if isinstance(o, Finding) and o.trap is KEEPS_STATE and o.check != ONE_GRAPH_TWICE else o
            for o in outcomes]


def sliced_context(op, given, reference, plan, options, earlier):
    """The context of the given values' slice (strategies.sliced), where the op and the reference take it alike:
    its first forward runs, the reference (where there is one) takes it and agrees with the op's forward as closely
    as on the whole. None otherwise (a shape the op refuses, or a forward the slice changes): then the whole is
    checked."""
    if any(isinstance(o, Finding) and o.trap is CRASHES for o in earlier):
        return None
    try:
        context = Context(op, sliced(given.values, plan), SLICED, reference, given=given, options=options)
        if reference is not None and context.forward_error > max(FORWARD_WRONG / 10, 4 * (given.forward_error or 0)):
            return None
        return context
    except (OpRaised, OpFaulted, OutOfMemory, UsageError, Unkept):
        return None
    except RuntimeError as error:
        if not out_of_memory(error):
            raise
        return None


def grown_context(op, given, reference, earlier):
    """The given values grown past several blocks, by the first growth plan that the op and the reference
    both take; else (None, a note saying why not)."""
    plans, why_not = growth_plans(given.values, op.slots, op.varied)
    if not plans:
        if "already span" in why_not:
            return None, None
        return None, Note("the grown inputs", f"inputs not grown past one block ({why_not}): pass inputs of several "
                                              f"thousand elements to check every block and the tail", NOT_GROWN)
    for plan in plans:
        try:
            values_ = grow(given.values, plan)
        except Unkept as unkept:
            return None, Undecided("the grown inputs", unkept_words(given, unkept, "so nothing is decided on inputs "
                                                                                    "grown past one block"))
        try:
            context = Context(op, values_, GROWN, reference, given=given, earlier=earlier)
            if reference is not None:
                context.truth  # noqa: B018  (the reference must take the grown inputs too)
            return context, None
        except OpRaised as raised:
            why_not = f"the op refuses the inputs grown to {describe_shapes(values_)} ({clip(raised.message, 100)})"
        except UsageError as error:
            why_not = f"the inputs grown to {describe_shapes(values_)}: {clip(error, 100)}"
    return None, Note("the grown inputs", f"inputs not grown past one block: {why_not}: pass inputs of several "
                                          f"thousand elements yourself to check every block and the tail", NOT_GROWN)


def run(op, reference, second_order=False, grow_inputs=True, compile_backend=None, made_per_call=False):
    """(every outcome, what was checked): the given inputs, then the same grown. compile_backend: a backend for
    torch.compile (compile_backend.backend_for), or None to leave the compile checks out. made_per_call: the op is a
    class its callers make afresh for every call (see per_call). Each tensor's contract is found once (remembered)."""
    with remembered():
        return run_checks(op, reference, second_order, grow_inputs, compile_backend, made_per_call)


def run_checks(op, reference, second_order, grow_inputs, compile_backend, made_per_call):
    options = {"second_order": second_order, "compile": compile_backend}
    try:
        given = Context(op, op.values, GIVEN, reference, options=options)
    except OutOfMemory as oom:
        return [no_room(FORWARD, called(oom.what), oom.message)], describe_shapes(op.values)
    except RuntimeError as error:  # the checker's own work on the first forward's outputs found no room
        if not out_of_memory(error):
            raise
        return [no_room(FORWARD, "the checker's own work", clip(error, 120))], describe_shapes(op.values)
    except OpFaulted as fault:
        return [Finding(FORWARD, CRASHES, f"the op faulted the GPU in its forward: {fault.message}; {LOST}",
                        error=type(fault.error).__name__)], describe_shapes(op.values)
    except OpRaised as raised:
        too_early(raised)
        crash = Finding(FORWARD, CRASHES, f"the forward raised: {raised.message}", error=type(raised.error).__name__)
        return [crash], describe_shapes(op.values)
    if not given.outputs:
        if any(t.is_complex() and t.requires_grad for t in given.first.outputs):
            raise ComplexOutputs(f"{op.name} returns complex tensors")
        raise UsageError(f"{op.name} returned no floating-point tensor that carries a gradient")
    plan, _ = slice_plan(op.values, op.slots, op.varied)
    slicing = plan is not None and not any(i in op.kept for i in plan)
    if slicing and reference is None:  # differenced only for what its size can change; the slice, along every direction
        given.directions = WHOLE_DIRECTIONS
    try:
        given.truth  # noqa: B018  (a broken reference, or finite differences past their budget: the caller's)
    except (OpRaised, OpFaulted, OutOfMemory):
        pass  # the op refuses nudged values, or faults on them: the checks that need the right gradient say so
    try:
        outcomes = contract_notes(given)
    except RuntimeError as error:  # reading the inputs' contract found no room: nothing noted, the checks go on
        if not out_of_memory(error):
            raise
        outcomes = []
    checked = [describe_shapes(op.values)]
    found_by, sliced_ = set(), None
    if slicing:
        outcomes += run_set(given, options, checks=WHOLE, found_by=found_by)
        sliced_ = sliced_context(op, given, reference, plan, options, outcomes)
        rest = [c.name for c in CHECKS if c.name not in WHOLE]
        if given.directions is not None:  # the whole went along fewer directions: what passed there, again
            passed = {o.check for o in outcomes if isinstance(o, Passed)}
            rest[:0] = [name for name in AGAIN_ON_A_SLICE if name in passed]
        if sliced_ is not None:
            outcomes += run_set(sliced_, options, checks=rest, found_by=found_by, before=outcomes)
            again = ", a random grad_output again among them," if RANDOM in rest else ""  # (AGAIN_ON_A_SLICE)
            checked = [f"{checked[0]} (the forward, the same call twice, the writes and a random grad_output), "
                       f"the rest{again} on a slice of them, {describe_shapes(sliced_.values)}"]
        else:
            if RANDOM in rest:  # no slice after all: the whole again, along every direction
                given.directions = None
                given.__dict__.pop("_truth", None)
            outcomes += run_set(given, options, checks=rest, found_by=found_by, before=outcomes)
    else:
        outcomes += run_set(given, options)
    context = None
    if grow_inputs and not any(isinstance(o, Finding) and o.trap is CRASHES for o in outcomes):
        try:
            context, note = grown_context(op, given, reference, outcomes)
        except OutOfMemory as oom:
            context, note = None, no_room("the grown inputs", called(oom.what, ", on inputs grown past one block"),
                                          oom.message)
        except RuntimeError as error:  # growing the inputs, the checker's own work, found no room
            if not out_of_memory(error):
                raise
            context, note = None, no_room("the grown inputs", "the checker's own work, growing the inputs",
                                          clip(error, 120))
        except OpFaulted as fault:
            context, note = None, Finding("the grown inputs", CRASHES,
                                          f"the op faulted the GPU on inputs grown past one block ({fault.what}): "
                                          f"{fault.message}; {LOST}")
        if note:
            outcomes.append(note)
        if context is not None:
            outcomes += run_set(context, options)
            checked.append(f"grown to {describe_shapes(context.values)}")
    outcomes = drawn(outcomes, [given] + [c for c in (sliced_, context) if c is not None])
    if made_per_call:
        outcomes = per_call(outcomes)
    try:
        on_slice = (sliced_.truth if sliced_ is not None and given.directions is not None
                    and isinstance(sliced_.__dict__.get("_truth"), Truth) else None)
        truth = given.truth.describe(on_slice)
    except (OpRaised, OpFaulted, OutOfMemory, UsageError):
        truth = "the reference, in float64" if reference is not None else "finite differences"
    return outcomes, f"{' and '.join(checked)}; against {truth}"
