"""How the op is called: its real signature, fresh copies of every argument, and autograd's calls.

A forward may take anything: tensors, Python numbers and strings, None. Floating-point tensors
get gradients; everything else passes through unchanged. Every call works on fresh copies, so
an op that writes into its inputs (on purpose, with ctx.mark_dirty, or not) never touches the
caller's tensors, and each copy can be compared with what was passed afterwards.
"""
import copy
import dataclasses
import functools
import inspect
import types

import torch


# Who is told of each call the checker is about to make of the op (a pytest plugin that runs the checks in
# a worker process, so that a fault that kills the process can be told apart by the call that provoked it).
LISTENERS = []


def announce(what):
    """Tells every listener the call the checker is about to make of the op, in the report's words."""
    for listener in LISTENERS:
        listener(what)


class UsageError(ValueError):
    """The checker was called wrongly (not the op's fault): the command line exits 2 on it."""


class ComplexOutputs(UsageError):
    """The op returns complex tensors that carry a gradient, and took none: check_backward checks it again on their
    real and imaginary parts (complex_parts)."""


# torch's own words for an allocation that found no room, where it raises a plain RuntimeError rather than
# torch.OutOfMemoryError: a CUDA launch's, the CPU allocator's, cuBLAS's and cuDNN's workspaces'
OUT_OF_MEMORY_WORDS = ("CUDA error: out of memory", "CUDA out of memory", "DefaultCPUAllocator: can't allocate memory",
                       "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED")


def out_of_memory(error):
    """Whether error is torch's for an allocation that found no room (on the GPU or the CPU): its OutOfMemoryError,
    or a RuntimeError (torch.AcceleratorError, a launch's, among them) in torch's own words for one. Not any message
    that happens to say "out of memory" (an op's own assertion about its bounds stays the op's)."""
    return isinstance(error, torch.cuda.OutOfMemoryError) or (
        isinstance(error, RuntimeError) and any(w in str(error) for w in OUT_OF_MEMORY_WORDS))


REFERENCE_CALL = "the reference"  # what an OutOfMemory of the reference's own call says


class OutOfMemory(Exception):
    """The op's call (or the checker's own work) ran out of memory where the checker made it (what says where). The
    suite's own call of the op had room; the checker's has less, beside its copies of the inputs and gradients. So it
    is not the op's crash, and decides nothing: the runner says so, as undecided; a check that would fall back where
    the op refuses a call of the checker's own making falls back alike."""

    def __init__(self, what, error):
        super().__init__(what)
        self.what, self.error = what, error

    @property
    def message(self):
        first = str(self.error).strip().splitlines()
        return clip(f"{type(self.error).__name__}: {first[0] if first else ''}")


class Sample:
    """The op's own arguments, kept apart from the checker's options (as OpInfo's SampleInput is):
    check_backward(op, Sample(x, target, reduction="none", reference=r), reference=my_reference)
    passes the op an argument named `reference` that the checker never reads."""

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs

    def __repr__(self):
        return f"Sample({len(self.args)} positional, keywords {sorted(self.kwargs)})"


def clip(text, limit=160):
    """text on one line, at most about limit characters: an error message fit for a report. A cut
    ends at a word, with an ellipsis, never inside a bracket it leaves open."""
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    for opening, closing in ("()", "[]", "{}"):
        while cut.count(opening) > cut.count(closing) and opening in cut:
            cut = cut[:cut.rindex(opening)].rstrip()
    return cut.rstrip(",;:") + " ..."


def is_function(fn):
    return isinstance(fn, type) and issubclass(fn, torch.autograd.Function)


def backward_method(fn):
    """The Function's backward as autograd calls it: its vjp where it defines that instead."""
    if (getattr(fn, "vjp", None) is not getattr(torch.autograd.Function, "vjp", None)
            and getattr(fn, "backward", None) is getattr(torch.autograd.Function, "backward", None)):
        return fn.vjp
    return fn.backward


def _forward_parameters(fn):
    """The forward's parameters, less ctx (absent where the Function uses setup_context)."""
    parameters = list(inspect.signature(fn.forward).parameters.values())
    uses_setup_context = getattr(fn, "setup_context", None) is not torch.autograd.Function.setup_context
    return parameters if uses_setup_context else parameters[1:]


def _signature_of(fn):
    if is_function(fn):
        return inspect.Signature(_forward_parameters(fn))
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: take the arguments as given
        return None


def differentiable(value):
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def read_by(value, depth=0):
    """The tensors a callable argument reads, where it can be told: a module's parameters and buffers; what a
    function's closure cells hold (a tensor, a module, a function, or a list, tuple or dict of them), a bound
    method's object, a functools.partial's function and arguments, a callable object's attributes (and those of an
    object any of these holds); nothing for anything else."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, torch.nn.Module):
        return list(value.parameters()) + list(value.buffers())
    if depth > 3:
        return []
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in read_by(v, depth + 1)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in read_by(v, depth + 1)]
    if isinstance(value, functools.partial):
        return [t for v in (value.func, *value.args, *value.keywords.values()) for t in read_by(v, depth + 1)]
    if isinstance(value, (type, types.ModuleType)) or not (callable(value) or depth > 0):
        return []
    held = [getattr(value, "__self__", None)]
    for cell in getattr(value, "__closure__", None) or ():
        try:
            held.append(cell.cell_contents)
        except ValueError:  # a cell not yet filled
            continue
    # An object's own attributes: a callable object's (a wrapper holding a model, its __call__ reading it), or those
    # of an object a callable holds (a bound method's, a closure's).
    attributes = getattr(value, "__dict__", None)
    if isinstance(attributes, dict) and not isinstance(value, (types.FunctionType, types.MethodType)):
        held += list(attributes.values())
    return [t for v in held if v is not None and v is not value for t in read_by(v, depth + 1)]


def as_made(value):
    """A dict, list or set argument as the caller made it, afresh for each call the checker makes: a forward may
    take from it (options.pop("method")), which no caller's own call ever sees twice (each builds its own, and
    autograd runs a forward once). Only containers of plain values (numbers, strings, None, and containers of
    them) are copied: tensors, modules and objects pass as they are."""
    if isinstance(value, (dict, list, set)) and _plain(value):
        return copy.deepcopy(value)
    if holds_tensors(value):
        return tensors_afresh(value)
    return value


def tensors_afresh(value, dtype=None):
    """A list or tuple holding tensors (none wanting a gradient: Op refuses one that does), made afresh for one
    call: each tensor a copy laid out as given, its floating-point ones in dtype where given. A forward that takes
    from the list, or writes into a tensor in it, changes neither the caller's tensors nor the next call's."""
    return _rebuilt(value, [same_layout(v.detach(), dtype if v.is_floating_point() else None)
                            if isinstance(v, torch.Tensor) else v for v in value])


def _rebuilt(value, items):
    """A list or tuple of value's type (a namedtuple's too) holding items."""
    kind = type(value)
    return kind._make(items) if hasattr(kind, "_make") else kind(items)


def _plain(value, depth=0):
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return True
    if depth > 4 or not isinstance(value, (dict, list, tuple, set, frozenset)):
        return False
    items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
    return all(_plain(item, depth + 1) for item in items)


@dataclasses.dataclass
class Slot:
    """One argument: where it goes (an index into args, or a keyword), its name, its value, and how
    the caller gave it ("positional", "keyword" or "default"): the reference is called the same way."""
    key: object
    name: str
    value: object
    given: str = "positional"
    parts: bool = False  # a complex value held as its real and imaginary parts (complex_parts): its last dimension


    @property
    def differentiable(self):
        return differentiable(self.value)


# The attribute complex_parts sets on the wrapper it makes of an op: the names of the slots that hold a complex value
# as its real and imaginary parts. A name of the checker's own, so that an op's attribute of its own is never read.
PARTS_ATTRIBUTE = "_backward_check_complex_parts"


class Op:
    """The op bound to one set of arguments. Function subclasses are called through .apply with
    their forward's signature bound (defaults kept); other callables as they are."""

    def __init__(self, fn, args, kwargs, device=None, no_grad=(), frozen_by_callers=()):
        if isinstance(fn, torch.autograd.Function):
            name = type(fn).__name__
            raise UsageError(f"pass the Function class itself, {name}, not an instance of it ({name}()): the checker "
                             f"calls {name}.apply")
        if not callable(fn):
            raise UsageError(f"check_backward takes an autograd.Function subclass or a callable, not "
                             f"{type(fn).__name__}")
        self.fn = fn
        self.function = is_function(fn)
        self.name = getattr(fn, "__name__", getattr(fn, "_qualname", type(fn).__name__))  # a custom op: ns::name
        signature = _signature_of(fn)
        # An op handed a function together with tensors it reads runs where the caller put them: moving a copy
        # of those tensors to the kernels' device would hand the op tensors the function never reads.
        read = {id(t) for v in (*args, *kwargs.values()) if callable(v) and not isinstance(v, torch.Tensor)
                for t in read_by(v)}
        if any(isinstance(v, torch.Tensor) and id(v) in read for v in (*args, *kwargs.values())):
            device = None
        # An op handed a generator of its own draws on the generator's device: its tensors stay there too.
        if any(isinstance(v, torch.Generator) and device is not None and v.device.type != device.type
               for v in (*args, *kwargs.values())):
            device = None
        args = tuple(_to_device(a, device) for a in args)
        kwargs = {k: _to_device(v, device) for k, v in kwargs.items()}
        if signature is not None:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError as error:
                raise UsageError(f"{self.name}{signature} cannot take these arguments: {error}") from None
            named = set(bound.arguments)
            bound.apply_defaults()
            self.slots = self._slots_from(bound, named, len(args))
        else:
            self.slots = [Slot(i, f"argument {i}", a) for i, a in enumerate(args)]
            self.slots += [Slot(k, k, v, "keyword") for k, v in kwargs.items()]
        for slot in self.slots:
            slot.parts = slot.name in getattr(fn, PARTS_ATTRIBUTE, ())
        if self.function:  # Function.apply passes no keywords: keyword-only parameters keep their defaults
            if any(isinstance(s.key, str) and s.given != "default" for s in self.slots):
                raise UsageError(f"{self.name}.forward has keyword-only parameters, which Function.apply cannot pass")
            self.slots = [s for s in self.slots if not isinstance(s.key, str)]
        # A list of tensors none of which requires grad (an NUFFT's interpolation tables) is passed to every call
        # as it is, a constant the checker never varies; one that holds a tensor wanting a gradient is refused,
        # as the checker cannot take a gradient through it.
        unsupported = [s.name for s in self.slots if holds_tensors(s.value, wanting_grad=True)]
        if unsupported:
            raise UsageError(f"{self.name}'s arguments {unsupported} hold a list of tensors of which one requires "
                             f"grad, which the checker does not take: wrap the op in a function that takes those "
                             f"tensors one by one")
        no_grad = self.positions(no_grad, "no_grad")
        self.inputs = [i for i, s in enumerate(self.slots) if s.differentiable and i not in no_grad]
        # The inputs a function argument reads (`f, *phi`; `net, *net.parameters()`): f closes over these very
        # tensors, so the op gets them, not copies; the checker writes the values it tries into them, in place,
        # and restore() puts back what they held. It never changes their shape or layout, nor freezes them.
        # read (above) names them: where any is read, nothing was moved, so these are the function's own.
        self.kept = {i: self.slots[i].value for i in self.inputs
                     if id(self.slots[i].value) in read and self.slots[i].value.is_leaf}
        self._held = {i: (t.detach().clone(), t.requires_grad) for i, t in self.kept.items()}
        # A torch.Generator the op is passed is its own to draw from: each call the checker makes starts it where
        # the caller's call did, so that two calls draw alike (as torch's own generators are seeded alike).
        self.generators = [(s.value, s.value.get_state()) for s in self.slots if isinstance(s.value, torch.Generator)]
        # The inputs the op's callers do pass frozen (requires_grad=False): where the checker freezes another,
        # the op may refuse it, as no caller would know.
        self.frozen_by_callers = self.positions(frozen_by_callers, "frozen_by_callers")
        if not self.inputs:
            listed = [s.name for s in self.slots if holds_tensors(s.value)]
            within = (f" (a list of tensors, as {listed} hold, is passed as it is, a constant: pass the tensors "
                      f"to take a gradient for one by one)") if listed else ""
            raise UsageError(f"{self.name} was given no floating-point tensor to take a gradient for{within}; pass "
                             f"the op's inputs: check_backward(op, x) or (op, x, y, eps=1e-6)")
        empty = [self.slots[i].name for i in self.inputs if self.slots[i].value.numel() == 0]
        if empty:
            raise UsageError(f"{self.name}'s input(s) {empty} hold no elements: pass inputs with at least one")

    def positions(self, names, keyword):
        """The positions of the arguments names names (names, or positions from 0), as a set; UsageError for
        one the op has no argument of."""
        names = (names,) if isinstance(names, (str, int)) else tuple(names)
        by_name = {s.name: i for i, s in enumerate(self.slots)}
        unknown = [n for n in names if isinstance(n, bool) or not isinstance(n, (str, int)) or
                   (isinstance(n, str) and n not in by_name) or (isinstance(n, int) and not 0 <= n < len(self.slots))]
        if unknown:
            raise UsageError(f"{keyword} names {unknown}, which {self.name} has no argument of: it takes "
                             f"{[s.name for s in self.slots]} (names, or positions from 0)")
        return {by_name[n] if isinstance(n, str) else n for n in names}

    @staticmethod
    def _slots_from(bound, named, positional_count):
        slots = []
        for name, value in bound.arguments.items():
            kind = bound.signature.parameters[name].kind
            given = "default" if name not in named else "positional" if len(slots) < positional_count else "keyword"
            if kind is inspect.Parameter.VAR_POSITIONAL:
                slots += [Slot(len(slots), f"{name}[{i}]", v) for i, v in enumerate(value)]
            elif kind is inspect.Parameter.VAR_KEYWORD:
                slots += [Slot(k, k, v, "keyword") for k, v in value.items()]
            elif kind is inspect.Parameter.KEYWORD_ONLY:
                slots.append(Slot(name, name, value, given))
            else:
                slots.append(Slot(len(slots), name, value, given))
        return slots


    @property
    def values(self):
        return [s.value for s in self.slots]

    # -- calls ---------------------------------------------------------------------------

    def arguments(self, values):
        """(args, kwargs) of the op on these values, every argument in its place."""
        args = [v for s, v in zip(self.slots, values) if not isinstance(s.key, str)]
        kwargs = {s.key: v for s, v in zip(self.slots, values) if isinstance(s.key, str)}
        return args, kwargs

    @property
    def varied(self):
        """The inputs whose shape, layout and requires_grad the checker may vary: all but the kept ones."""
        return [i for i in self.inputs if i not in self.kept]

    def hold(self, i, value):
        """Kept input i holding value (a tensor of its shape), written in place where it is another tensor."""
        kept = self.kept[i]
        if value is not kept:
            if tuple(value.shape) != tuple(kept.shape):
                raise UsageError(f"`{self.slots[i].name}` is read by a function argument, so its shape stays "
                                 f"{tuple(kept.shape)}")
            with torch.no_grad():
                kept.copy_(value)
        return kept

    def restore(self):
        """Every kept input as it was before the checker wrote into it."""
        for i, (values, requires_grad) in self._held.items():
            with torch.no_grad():
                self.kept[i].copy_(values)
            self.kept[i].requires_grad_(requires_grad)

    def call(self, values, fn=None):
        """The op on these values: a Function through .apply, every argument in its place. Another fn
        (the reference) is called as the caller called the op: positional, keyword, defaults left out. A kept
        input (read by a function argument) is itself passed, holding the value given for it; under no_grad
        (finite differences' calls) it holds its own values again after the call."""
        for generator, state in self.generators:
            generator.set_state(state)
        if self.kept and any(values[i] is not t for i, t in self.kept.items()):
            before = {i: t.detach().clone() for i, t in self.kept.items()} if not torch.is_grad_enabled() else {}
            values = [self.hold(i, v) if i in self.kept else v for i, v in enumerate(values)]
            try:
                return self.call(values, fn)
            finally:
                for i, held in before.items():
                    with torch.no_grad():
                        self.kept[i].copy_(held)
        values = [as_made(v) for v in values]
        if fn is None:
            args, kwargs = self.arguments(values)
            return (self.fn.apply if self.function else self.fn)(*args, **kwargs)
        args = [v for s, v in zip(self.slots, values) if s.given == "positional"]
        kwargs = {s.name: v for s, v in zip(self.slots, values) if s.given == "keyword"}
        return fn(*args, **kwargs)

    def fresh(self, frozen=(), dtype=None, values=None):
        """Fresh copies of every argument: (leaves, passed). leaves[i] is the leaf for each input that
        wants a gradient (None elsewhere); passed is what the op receives: a non-leaf copy of each
        such leaf (so an in-place forward is legal), a clone of every other tensor, other values as
        they are."""
        leaves, passed = [], []
        for i, (_, v) in enumerate(zip(self.slots, values if values is not None else self.values)):
            if i in self.kept:  # the tensor itself, holding v: the function argument reads it
                leaf = self.hold(i, v)
                leaf.requires_grad_(True)
                leaves.append(leaf)
                passed.append(leaf)
                continue
            if not isinstance(v, torch.Tensor):
                leaves.append(None)
                passed.append(tensors_afresh(v, dtype) if holds_tensors(v) else v)
                continue
            copy = same_layout(v.detach())
            if dtype is not None and copy.is_floating_point():
                copy = same_layout(copy, dtype)
            if i in self.inputs and i not in frozen:
                leaf = copy.requires_grad_(True)
                leaves.append(leaf)
                passed.append(same_layout(leaf))
            else:
                leaves.append(None)
                passed.append(copy)
        return leaves, passed


def packed(t):
    """Whether t's elements fill its memory without gaps, in some order of its dimensions (contiguous, or
    transposed), or overlap (stride 0): what clone() copies as it is."""
    # the usual case, told in a tenth of the loop's time (a check asks hundreds of times); a nested tensor is
    # contiguous without strides to read, and goes the loop's way, as it always did
    if t.layout == torch.strided and not t.is_nested and t.is_contiguous():
        return True
    if any(stride == 0 for stride in t.stride()):
        return True
    expected = 1
    for size, stride in sorted(((size, stride) for size, stride in zip(t.shape, t.stride()) if size > 1),
                               key=lambda pair: pair[1]):
        if stride != expected:
            return False
        expected *= size
    return True


def same_layout(t, dtype=None):
    """A copy of t with t's very strides (a differentiable one where t requires grad), in dtype: clone()
    keeps a transposed layout but packs a padded view (`x[:, :d]`) dense, and the checker hands the op its
    inputs as they were laid out. Gaps between the elements hold NaN, as the checker's own padded views do."""
    dtype = dtype or t.dtype
    if packed(t):
        return t.clone() if dtype == t.dtype else t.to(dtype, copy=True)
    span = 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    fill = float("nan") if dtype.is_floating_point else 0
    out = torch.full((span,), fill, dtype=dtype, device=t.device).as_strided(tuple(t.shape), t.stride())
    return out.copy_(t)


def holds_tensors(value, wanting_grad=False):
    """Whether value is a list or tuple holding a tensor (wanting_grad: one that requires grad)."""
    return isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) and (v.requires_grad or not
                                                                                      wanting_grad) for v in value)


def _to_device(value, device):
    """value on device's type: a tensor, or a list or tuple of them, moved (where the op's other tensors go)."""
    if device is not None and isinstance(value, torch.Tensor) and value.device.type != device.type:
        return value.to(device)
    if device is not None and holds_tensors(value):
        return _rebuilt(value, [_to_device(v, device) for v in value])
    return value


def flatten(output):
    """The tensors an op returned, in order (a tensor, or nested tuples, lists and dicts of them)."""
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, (tuple, list)):
        return [t for o in output for t in flatten(o)]
    if isinstance(output, dict):
        return [t for o in output.values() for t in flatten(o)]
    return []


def carries_gradient(t):
    """An output autograd will send a gradient to: floating-point, and part of the graph."""
    return t.is_floating_point() and t.requires_grad


@dataclasses.dataclass
class Run:
    """One forward on fresh copies: what went in, what came out, and which outputs carry gradients."""
    leaves: list
    passed: list
    outputs: list          # every tensor output
    graded: list           # the outputs that carry a gradient
    raw: object = None     # what the op returned, as it returned it

    def grad(self, grad_outputs, retain_graph=False, only=None, positions=None, drew=None):
        """autograd.grad of the graded outputs under grad_outputs, for every leaf (None where none).
        positions: where, among all outputs, each grad_output's output is (those that carried a gradient
        with every input wanting one): an output that carries none here (it depends on a frozen input
        alone) is left out with its grad_output, so no grad_output meets another's output.
        only: which of those to take it of (the others unused: autograd hands their backward zeros,
        or None after ctx.set_materialize_grads(False)); grad_outputs then one for each of those. The backward is
        seeded (see seeded), and drew told where it drew."""
        wanted = [leaf for leaf in self.leaves if leaf is not None]
        if not wanted:
            return [None] * len(self.leaves)
        if positions is None:
            positions = [k for k, t in enumerate(self.outputs) if carries_gradient(t)]
        chosen = range(len(positions)) if only is None else only
        pairs = [(self.outputs[positions[j]], g) for j, g in zip(chosen, grad_outputs)
                 if positions[j] < len(self.outputs) and carries_gradient(self.outputs[positions[j]])]
        if not pairs:
            return [None] * len(self.leaves)
        outputs, grad_outputs = zip(*pairs)
        grads = iter(seeded_grad(outputs, wanted, grad_outputs, allow_unused=True, retain_graph=retain_graph,
                                 drew=drew))
        return [next(grads) if leaf is not None else None for leaf in self.leaves]


def torch_generator_states(devices):
    """What a draw from torch's CPU generator, or a CUDA one of devices, changes."""
    return [torch.get_rng_state(), *(torch.cuda.get_rng_state(d) for d in devices)]


def same_states(these, those):
    return all(torch.equal(a, b) for a, b in zip(these, those))


@functools.lru_cache(maxsize=None)
def cuda_devices():
    """The CUDA devices' indices (none without a GPU), asked once a process: torch.cuda.is_available() asks the
    driver each time, and a small op's check seeds thousands of calls."""
    return tuple(range(torch.cuda.device_count())) if torch.cuda.is_available() else ()


def seeded(fn, *args, drew=None, **kwargs):
    """fn(*args, **kwargs) with torch's random generators seeded alike for every call (and restored after), so
    that an op that draws random numbers (a dropout; a backward that samples) gives the same answer twice, as a
    stateless op must. The seed is torch's own initial seed as the check began (the pytest plugin's worker seeds
    it from the op and its signature, and again with the next seed for a verdict that may be the draws'). drew: a
    list that gets True appended where fn drew from them."""
    devices = cuda_devices()
    seed = torch.initial_seed()
    # What torch.random.fork_rng(devices) saves and restores, without its context manager's own work (paid on
    # every seeded call, and a check of a small op seeds thousands of them)
    saved = torch_generator_states(devices)
    try:
        # torch.manual_seed(seed), less its work for devices that are not there: it also queues a seed for CUDA,
        # XPU and MTIA where none is started, which was most of a small op's check (docs/check-cost.md)
        torch.default_generator.manual_seed(seed)
        if devices:
            torch.cuda.manual_seed_all(seed)
        if drew is None:
            return fn(*args, **kwargs)
        before = torch_generator_states(devices)
        out = fn(*args, **kwargs)
        if not same_states(torch_generator_states(devices), before):
            drew.append(True)
        return out
    finally:
        torch.set_rng_state(saved[0])
        for device, state in zip(devices, saved[1:]):
            torch.cuda.set_rng_state(state, device)


def seeded_grad(*args, drew=None, **kwargs):
    """torch.autograd.grad, seeded (see seeded): every backward the checker compares draws alike."""
    return seeded(torch.autograd.grad, *args, drew=drew, **kwargs)


def seeded_call(op, passed, fn=None):
    """op.call on passed, seeded (see seeded)."""
    return seeded(lambda: op.call(passed, fn=fn))


def forward(op, frozen=(), dtype=None, values=None, fn=None):
    leaves, passed = op.fresh(frozen=frozen, dtype=dtype, values=values)
    raw = seeded_call(op, passed, fn=fn)
    outputs = flatten(raw)
    return Run(leaves, passed, outputs, [t for t in outputs if carries_gradient(t)], raw)
