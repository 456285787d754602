"""What the pytest plugin (pytest_backward_check.py) records while a test suite runs: each call of a
torch.autograd.Function's .apply, and of a torch.library custom op with a registered autograd, that gets an input
which requires grad. A call is offered for checking only where its signature is new for its op: the dtypes, ranks
and layouts of its tensors, which of them want a gradient, and the values of its other arguments (strings, flags,
None, dtypes, enums; numbers by their first few values, then by sign). Its arguments are copied, if the plugin keeps
the call (selection.py decides), before the forward can touch them, onto the CPU (so the copies hold no device
memory and no reference to the test's own tensors), each laid out as the test's was.

Whatever the arguments are, recording never raises into the test: a call it cannot take is a line in the table.
"""
import collections
import contextlib
import dataclasses
import enum
import hashlib
import inspect
import math
import numbers
import sys
import time
import weakref

import torch

from ..calling import clip, read_by

try:  # torch.library.custom_op (torch 2.4 and later): the type of what it returns
    from torch._library.custom_ops import CustomOpDef
except ImportError:  # pragma: no cover
    CustomOpDef = None

FUNCTION, CUSTOM_OP = "autograd.Function", "custom op"
# Modules whose Functions are torch's own machinery (checkpointing, compiled graphs) or the checker's: not the
# suite's ops. The checker's own tests (backward_check.tests) are a suite like any other: their ops are recorded.
NOT_THE_SUITES = ("torch", "backward_check")
SUITES_INSIDE = ("backward_check.tests",)


def _not_the_suites(module):
    """Whether a Function defined in module is torch's or the checker's, not the suite's."""
    inside = any(module == suite or module.startswith(suite + ".") for suite in SUITES_INSIDE)
    return module.split(".")[0] in NOT_THE_SUITES and not inside
# A number argument's values told apart, per op and position, before the rest go by their sign alone: enough for
# a block size or an ignore_index to pick its path, and a float that changes in every test makes a handful of
# signatures, not one a test.
NUMBER_VALUES_TOLD_APART = 3


@dataclasses.dataclass
class CopiedTensor:
    """One tensor argument, copied onto the CPU: the storage it viewed (flat, or a compact copy of what it reads
    where its view of a far larger buffer would copy mostly gaps), and the view (size and stride) of it the op was
    given, so a stride-0 or padded input stays one. device: where the test had it."""
    flat: torch.Tensor
    size: tuple
    stride: tuple
    device: str
    requires_grad: bool

    def tensor(self, device=None):
        """The copy as the op was given it, on device (where the test had it, by default): a tensor of its own, so an op
        that writes into it, or resizes it, changes neither the copy nor what the copy was read from."""
        viewed = self.flat.to(device or self.device, copy=True).as_strided(self.size, self.stride)
        return viewed.requires_grad_(self.requires_grad)


def _span(t):
    """How many elements of its storage t's view reaches over, from its first."""
    return 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))


def _kept_flat(t):
    """Whether t's copy is the storage it views (else a compact copy: a narrow view of a far larger buffer)."""
    return _span(t) <= 2 * t.numel() + 4096


def copied_bytes(t):
    """The bytes copy_tensor(t) will hold, known before it copies anything."""
    if t.numel() == 0:
        return 0
    return (_span(t) if _kept_flat(t) else 2 * t.numel()) * t.element_size()


def copy_tensor(t):
    requires_grad = t.requires_grad
    with torch.no_grad():
        t = t.detach()
        size, stride = tuple(t.shape), tuple(t.stride())
        if t.numel() == 0:
            return CopiedTensor(torch.empty(0, dtype=t.dtype), size, stride, str(t.device), requires_grad)
        if _kept_flat(t):
            flat = t.as_strided((_span(t),), (1,), t.storage_offset()).to("cpu", copy=True)
        else:
            flat, stride = _compact(t)
        return CopiedTensor(flat, size, stride, str(t.device), requires_grad)


def _compact(t):
    """(storage, strides) of a copy of t that keeps its stride-0 dims, the order of its others, and a gap after
    each element (so it stays non-contiguous), but not the far larger buffer t is a narrow view of."""
    base = t
    for d, (n, s) in enumerate(zip(t.shape, t.stride())):
        if s == 0 and n > 1:
            base = base.narrow(d, 0, 1)
    order = sorted(range(t.dim()), key=lambda d: -base.stride(d))
    inverse = sorted(range(t.dim()), key=order.__getitem__)
    buffer = torch.zeros((*[base.shape[d] for d in order], 2), dtype=t.dtype)
    buffer[..., 0].copy_(base.permute(order))
    return buffer.reshape(-1), tuple(buffer[..., 0].permute(inverse).expand(t.shape).stride())


# -- arguments, and the containers the plugin looks into ----------------------------------------------------

def _is_namedtuple(value):
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def children(value):
    """[(key, item)] of a list, tuple, named tuple or dict (plain or ordered) the plugin looks into; None for
    anything else, which it passes as it is (a torch.Size, a module, a dict subclass of the suite's)."""
    if type(value) in (list, tuple) or _is_namedtuple(value):
        return list(enumerate(value))
    if type(value) in (dict, collections.OrderedDict):
        return list(value.items())
    return None


def rebuilt(value, items):
    """A container of value's type holding items ([(key, item)], as children gives them)."""
    if isinstance(value, dict):
        return type(value)(items)
    values = [v for _, v in items]
    if _is_namedtuple(value):
        return type(value)._make(values)
    return type(value)(values)


def copy_value(value):
    """A copy of an argument: tensors copied (also inside lists, tuples and dicts), anything else as it is."""
    if isinstance(value, torch.Tensor):
        return copy_tensor(value)
    items = children(value)
    return value if items is None else rebuilt(value, [(k, copy_value(v)) for k, v in items])


def restore_value(value, device=None):
    """copy_value undone: every CopiedTensor a tensor again, where the test had it (or on device)."""
    if isinstance(value, CopiedTensor):
        return value.tensor(device)
    items = children(value)
    return value if items is None else rebuilt(value, [(k, restore_value(v, device)) for k, v in items])


@dataclasses.dataclass(frozen=True)
class ReadTensor:
    """A positional argument that is a tensor a callable argument reads (a module's parameter, a tensor its
    function closes over): not copied, since the callable would never read a copy; put back as the callable's
    own tensor (the reader's k-th, as calling.read_by lists them), so the op gets the very tensor it reads."""
    reader: int
    k: int


def copy_arguments(args, kwargs):
    """(args, kwargs) copied by copy_value, but for a leaf tensor a callable argument reads: a ReadTensor."""
    readers = {}
    for j, a in enumerate(args):
        if callable(a) and not isinstance(a, torch.Tensor):
            for k, t in enumerate(read_by(a)):
                readers.setdefault(id(t), (j, k))
    copied = tuple(ReadTensor(*readers[id(a)]) if isinstance(a, torch.Tensor) and a.is_leaf and id(a) in readers
                   else copy_value(a) for a in args)
    return copied, copy_value(dict(kwargs))


def restore_arguments(args, kwargs, device=None):
    """copy_arguments undone: every copy a tensor again (restore_value), every ReadTensor its reader's tensor."""
    args, kwargs = restore_value(args, device), restore_value(kwargs, device)
    if any(isinstance(a, ReadTensor) for a in args):
        args = tuple(read_by(args[a.reader])[a.k] if isinstance(a, ReadTensor) else a for a in args)
    return args, kwargs


def tensors_in(value):
    if isinstance(value, torch.Tensor):
        yield value
        return
    for _, item in children(value) or ():
        yield from tensors_in(item)


# -- signatures --------------------------------------------------------------------------------------

def layout_of(t):
    if any(s == 0 and n > 1 for n, s in zip(t.shape, t.stride())):
        return "stride-0"
    return "contiguous" if t.is_contiguous() else "non-contiguous"


def number_key(told_apart, value):
    """A number's part in a signature: its value while it is one of the first NUMBER_VALUES_TOLD_APART distinct
    values seen at its place (told_apart, which this extends), or 0, inf or NaN; else its sign."""
    if math.isnan(value) or math.isinf(value) or value == 0:
        return repr(value)
    if value in told_apart or len(told_apart) < NUMBER_VALUES_TOLD_APART:
        if value not in told_apart:
            told_apart.append(value)
        return repr(value)
    return "< 0" if value < 0 else "> 0"


def _name_of_callable(value, attribute):
    name = getattr(value, attribute, None)
    return name if isinstance(name, str) else type(value).__name__


def _shape_of(value, place, told_apart):
    """(entry, words) of one argument at place (its position or keyword, and where inside a container): its
    part of the call's signature, made of strings, numbers, booleans and None only (so that it hashes alike in
    every process), and its description for the table."""
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).replace("torch.", "")
        wants_grad = wants_a_gradient(value)
        layout = layout_of(value) if value.layout == torch.strided else str(value.layout).replace("torch.", "")
        words = [f"{dtype} {value.dim()}-d"] + ([layout] if layout != "contiguous" else [])
        if value.is_floating_point() and not wants_grad:
            words.append("(no grad)")
        return ("tensor", dtype, value.dim(), layout, wants_grad), " ".join(words)
    if value is None or isinstance(value, (str, bool)):  # a mode ("mean", causal=True) picks a code path
        return ("value", value), clip(repr(value), 40)
    if isinstance(value, numbers.Real):
        kind, plain = ("int", int(value)) if isinstance(value, numbers.Integral) else ("float", float(value))
        return ("number", kind, number_key(told_apart.setdefault(place, []), plain)), clip(repr(plain), 24)
    if isinstance(value, (torch.dtype, torch.device, torch.layout, torch.memory_format, enum.Enum)):
        return ("value", str(value)), str(value)
    if isinstance(value, torch.Size):
        return ("type", "torch.Size"), f"torch.Size({list(value)})"
    items = children(value)
    if items is not None:
        entries, words = [], []
        for key, item in items:
            entry, word = _shape_of(item, f"{place}.{key}", told_apart)
            entries.append((str(key), entry))
            words.append(f"{key}: {word}" if isinstance(value, dict) else word)
        kind = "dict" if isinstance(value, dict) else "list" if isinstance(value, list) else "tuple"
        brackets = {"dict": "{}", "list": "[]", "tuple": "()"}[kind]
        return (kind, tuple(entries)), brackets[0] + ", ".join(words) + brackets[1]
    if callable(value) and not isinstance(value, torch.nn.Module):  # a function or class that picks a path
        where = f"{getattr(value, '__module__', None) or ''}.{_name_of_callable(value, '__qualname__')}"
        return ("value", where), clip(_name_of_callable(value, "__name__"), 40)
    return ("type", f"{type(value).__module__}.{type(value).__qualname__}"), type(value).__name__


def signature_of(args, kwargs, told_apart):
    """(signature, description) of a call: what makes it new for its op, and the same in a few words ('float32
    2-d, float32 2-d stride-0 (no grad), 'mean', reduction=...'). told_apart: the op's numbers seen, by place."""
    shaped = [(str(i), _shape_of(a, str(i), told_apart)) for i, a in enumerate(args)]
    shaped += [(k, _shape_of(v, k, told_apart)) for k, v in kwargs.items()]
    signature = (tuple(entry for _, (entry, _) in shaped[:len(args)]),
                 tuple((k, entry) for k, (entry, _) in shaped[len(args):]))
    words = [w for _, (_, w) in shaped[:len(args)]] + [f"{k}={w}" for k, (_, w) in shaped[len(args):]]
    return signature, ", ".join(words)


# -- the op, named and found again ----------------------------------------------------------------------

def op_name(op):
    """A Function by its module and name; a custom op by its op name ("mylib::gelu")."""
    if CustomOpDef is not None and isinstance(op, CustomOpDef):
        return op._qualname
    return f"{op.__module__}.{op.__qualname__}"


def _where_defined(op):
    fn = op._init_fn if CustomOpDef is not None and isinstance(op, CustomOpDef) else op
    return getattr(fn, "__module__", None) or "", getattr(fn, "__qualname__", "")


def resolve(module, qualname, modules=None):
    """The object module.qualname names, from modules (sys.modules by default); KeyError or AttributeError
    where there is none."""
    found = (modules or sys.modules)[module]
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def importable_reference(op):
    """((module, qualname), None) by which a fresh process finds op again, or (None, why it cannot)."""
    module, qualname = _where_defined(op)
    if "<locals>" in qualname:
        return None, f"it is defined inside a function ({qualname})"
    if module == "__main__":
        return None, "it is defined in the __main__ script"
    try:
        found = resolve(module, qualname)
    except (KeyError, AttributeError):
        return None, f"{module}.{qualname} does not name it"
    if found is not op:
        return None, f"{module}.{qualname} names another object"
    return (module, qualname), None


# -- the recorder ----------------------------------------------------------------------------------------

@dataclasses.dataclass
class RecordedCall:
    """One call of an op with a new signature, and, while the plugin keeps it, copies of its arguments."""
    op: object               # the Function subclass or the CustomOpDef
    name: str
    signature: tuple
    described: str           # the signature in words, with this call's values
    no_grad: tuple           # positions and keywords of floating-point tensors that did not require grad
    test: str                # the nodeid of the test that made it
    nbytes: int              # what its copies hold
    args: tuple = None       # the copies (None: not copied, or dropped)
    kwargs: dict = None
    order: int = 0           # the selection's: its place in the order calls were made,
    features: frozenset = frozenset()   # and what its signature shows (selection.features)

    @property
    def key(self):
        """The signature's name: the same in every process (pytest-xdist's workers tell theirs apart by it)."""
        return hashlib.sha1(f"{self.name}\0{self.signature!r}".encode()).hexdigest()

    @property
    def places(self):
        """The positions and keywords this call passed."""
        return (*range(len(self.args or ())), *(self.kwargs or {}))


def _no_grad_of(args, kwargs):
    """Where the test passed a floating-point or complex tensor that wants no gradient (a target, a table): the
    checker passes it through as it is, as it does integers."""
    return tuple([i for i, a in enumerate(args) if _frozen(a)] + [k for k, v in kwargs.items() if _frozen(v)])


def _frozen(value):
    return (isinstance(value, torch.Tensor) and (value.is_floating_point() or value.is_complex())
            and not value.requires_grad)


def wants_a_gradient(t):
    """A floating-point or complex tensor that requires grad (the checker checks a complex one through its real and
    imaginary parts)."""
    return (t.is_floating_point() or t.is_complex()) and t.requires_grad


def _recordable(tensors):
    """Plain strided tensors on a real device: no fake, functorch or distributed tensor subclass, no meta or sparse."""
    return all(type(t) in (torch.Tensor, torch.nn.Parameter) and t.layout == torch.strided and t.device.type != "meta"
               for t in tensors)


class Recorder:
    """Patches Function.apply and CustomOpDef.__call__ (install, uninstall) to record the calls a test makes, and
    offers each call with a new signature to offer(call, copy): copy() returns copies of its (args, kwargs), made
    only where offer keeps the call. test: the nodeid of the test whose body runs (None: record nothing). quiet:
    above 0 while the checker runs (it calls the op many times) or while a call is copied."""

    def __init__(self, offer, withdraw=None):
        self.offer = offer
        self.withdraw_offer = withdraw  # withdraw(call): takes back a call offered whose own run raised
        self.test = None
        self.quiet = 0
        self.signatures = {}        # op name: {signature: the test that first made it}
        self.told_apart = {}        # op name: {place: the number values seen there, up to NUMBER_VALUES_TOLD_APART}
        self.frozen = {}            # op name: {the positions and keywords a call passed frozen (no grad)}
        self.applied = {}           # op name: the class objects of that name applied (weakly held)
        self.reapplied = set()      # op names of which one class object was applied twice
        self.problems = []          # calls that could not be recorded, in words
        self.seconds = 0.0          # spent recording (signatures and copies), which the test's time leaves out
        self._patched = []

    # -- patching -------------------------------------------------------------------------------

    # The torch releases the version matrix (tools/version_matrix.py, docs/version-matrix.md) runs the plugin's
    # tests on: the usage error names them.
    TESTED_TORCH = "2.4 to 2.15"
    INHERITED = object()   # what _patch remembers of an attribute the owner did not hold itself

    def install(self):
        """Patches Function.apply and CustomOpDef.__call__, then applies a tiny Function once to prove that a call
        reaches the recorder and goes on to autograd. Where it does not (a torch whose Function.apply cannot be
        wrapped so), the patches are undone and a pytest.UsageError says what to do: never a crash of the suite."""
        recorder = self
        # Until torch 2.14 a Python classmethod; from 2.14 _C._FunctionBase's own, a classmethod_descriptor (no
        # __func__). Bound to the class called, either runs as before, with that class.
        original_apply = inspect.getattr_static(torch.autograd.Function, "apply", None)

        def apply(cls, *args, **kwargs):
            recorded = None
            if recorder.test is not None and not recorder.quiet:
                recorded = recorder.consider(cls, args, kwargs)
            if recorded is None:
                return original_apply.__get__(None, cls)(*args, **kwargs)
            with recorder.withdrawn_if_it_raises(recorded):
                result = original_apply.__get__(None, cls)(*args, **kwargs)
            recorder.learn_outputs(recorded, result)
            return result

        apply.__doc__, apply.__wrapped__ = original_apply.__doc__, getattr(original_apply, "__func__", original_apply)
        try:
            self._patch(torch.autograd.Function, "apply", classmethod(apply))
            why_not = self._why_calls_go_unrecorded()
        except Exception as error:  # noqa: BLE001  (a torch that refuses the patch: said, not a crash)
            why_not = f"patching it raised {type(error).__name__}: {clip(error)}"
        if why_not:
            self.uninstall()
            import pytest  # the recorder is the pytest plugin's; the package itself needs no pytest
            raise pytest.UsageError(
                f"--backward-check cannot record the calls of autograd.Functions on torch {torch.__version__}: "
                f"{why_not}. Run the suite without --backward-check, or with a torch the plugin is tested on "
                f"(torch {self.TESTED_TORCH}); please report it, with your torch version. check_backward and "
                f"assert_backward, called in a test, need no recording.")
        if CustomOpDef is not None:
            original_call = CustomOpDef.__dict__["__call__"]

            def call(op, *args, **kwargs):
                recorded = None
                if recorder.test is not None and not recorder.quiet and op._backward_fn is not None:
                    recorded = recorder.consider(op, args, kwargs)
                if recorded is None:
                    return original_call(op, *args, **kwargs)
                with recorder.withdrawn_if_it_raises(recorded):
                    result = original_call(op, *args, **kwargs)
                recorder.learn_outputs(recorded, result)
                return result

            call.__doc__, call.__wrapped__ = original_call.__doc__, original_call
            self._patch(CustomOpDef, "__call__", call)

    def _why_calls_go_unrecorded(self):
        """None where a Function applied under the patch reached the recorder, and autograd took its backward;
        else why not, in words. The recorder's consider is stood in for while it runs: the probe is no test's."""

        class Probe(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, grad_output):
                return grad_output * 2

        reached = []
        self.test, self.consider = "backward-check's probe", lambda op, args, kwargs: reached.append(op)
        try:
            with torch.enable_grad():
                x = torch.ones(2, requires_grad=True)
                grad, = torch.autograd.grad(Probe.apply(x), x, torch.tensor([1.0, 3.0]))
        except Exception as error:  # noqa: BLE001  (why the call failed is the message)
            return f"a Function applied under the patch raised {type(error).__name__}: {clip(error)}"
        finally:
            self.test = None
            del self.consider
        if reached != [Probe]:
            return "a Function applied under the patch never reached it (Function.apply is found elsewhere)"
        if grad.tolist() != [2.0, 6.0]:
            return f"a Function applied under the patch did not take its backward (gradient {grad.tolist()})"
        return None

    def _patch(self, owner, name, replacement):
        """owner.name = replacement, undone by uninstall (back to the owner's own, or to none: inherited)."""
        original = owner.__dict__.get(name, self.INHERITED)
        setattr(owner, name, replacement)
        self._patched.append((owner, name, original))

    def uninstall(self):
        while self._patched:
            owner, name, original = self._patched.pop()
            if original is self.INHERITED:
                delattr(owner, name)
            else:
                setattr(owner, name, original)

    # -- recording ------------------------------------------------------------------------------

    def consider(self, op, args, kwargs):
        """Records the call if it is one to check, and returns it (None where it is not recorded); never raises
        (the test's own call goes on regardless)."""
        self.quiet += 1
        start = time.perf_counter()
        try:
            return self._consider(op, args, kwargs)
        except Exception as error:  # noqa: BLE001  (recording must never break the test's call)
            self.problems.append(f"{self.test}: a call of {getattr(op, '__name__', type(op).__name__)} could not "
                                 f"be recorded ({type(error).__name__}: {clip(error, 200)})")
        finally:
            self.quiet -= 1
            self.seconds += time.perf_counter() - start

    def _consider(self, op, args, kwargs):
        if not torch.is_grad_enabled() or torch.compiler.is_compiling() or torch._C._are_functorch_transforms_active():
            return
        tensors = list(tensors_in((args, kwargs)))
        if not any(wants_a_gradient(t) for t in tensors) or not _recordable(tensors):
            return
        module, _ = _where_defined(op)
        if _not_the_suites(module):
            return
        name = op_name(op)
        self._count_application(name, op)
        no_grad = _no_grad_of(args, kwargs)
        self.frozen.setdefault(name, set()).update(no_grad)
        signature, described = signature_of(args, kwargs, self.told_apart.setdefault(name, {}))
        known = self.signatures.setdefault(name, {})
        if signature in known:
            return
        known[signature] = self.test
        call = RecordedCall(op, name, signature, described, no_grad, self.test,
                            sum(copied_bytes(t) for t in tensors))
        self.offer(call, lambda: copy_arguments(tuple(args), kwargs))
        return call

    def _count_application(self, name, op):
        """Notes a class object applied twice: held weakly, so a class made afresh for each call and dropped is
        never taken for one applied again (an id could be reused)."""
        if not isinstance(op, type):
            return
        seen = self.applied.setdefault(name, weakref.WeakSet())
        if op in seen:
            self.reapplied.add(name)
        seen.add(op)

    def made_per_call(self, name):
        """Whether the op of this name is a Function class made inside a function, afresh for each call: every
        class object of the name recorded was defined in a function (`<locals>` in its qualified name), and the
        suite never applied one twice."""
        seen = self.applied.get(name)
        return bool(seen) and name not in self.reapplied and all("<locals>" in c.__qualname__ for c in seen)

    def learn_outputs(self, call, result):
        """Adds what the test's own call returned (the rank of each output) to the recorded call's features, which
        rank it for its check (selection.output_features); never raises."""
        from .selection import output_features
        try:
            call.features = call.features | output_features(result)
        except Exception as error:  # noqa: BLE001  (ranking must never break the test's call)
            self.problems.append(f"{self.test}: the outputs of a call of {call.name} could not be read "
                                 f"({type(error).__name__}: {clip(error, 200)})")

    @contextlib.contextmanager
    def withdrawn_if_it_raises(self, call):
        """The test's own call of the op, recorded as call: where it raises (a test that expects an out-of-range
        target to be refused, say), the call is taken back, so its check never calls the op on arguments the op
        was meant to refuse, and its signature may be recorded again from a call that succeeds."""
        try:
            yield
        except BaseException:
            try:
                self.signatures.get(call.name, {}).pop(call.signature, None)
                if self.withdraw_offer is not None:
                    self.withdraw_offer(call)
            except Exception:  # noqa: BLE001  (taking it back must never hide the op's own error)
                pass
            raise
