"""What the pytest plugin (plugin.py) records while a test suite runs: each call of a torch.autograd.Function's
.apply, and of a torch.library custom op with a registered autograd, that gets an input which requires grad. The
arguments are copied before the forward can touch them, onto the CPU (so the copies hold no device memory and no
reference to the test's own tensors), each laid out as the test's was. A call is kept only where its signature
(the dtypes, ranks and layouts of its tensors, which of them want a gradient, its strings and flags) is new for
its op, and only up to a number of signatures per op.
"""
import dataclasses
import inspect
import sys

import torch

from .calling import clip

try:  # torch.library.custom_op (torch 2.4 and later): the type of what it returns
    from torch._library.custom_ops import CustomOpDef
except ImportError:  # pragma: no cover
    CustomOpDef = None

FUNCTION, CUSTOM_OP = "autograd.Function", "custom op"
# Modules whose Functions are torch's own machinery (checkpointing, compiled graphs) or the checker's: not the
# suite's ops.
NOT_THE_SUITES = ("torch", "backward_check")


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
        """The copy as the op was given it, on device (where the test had it, by default)."""
        viewed = self.flat.to(device or self.device).as_strided(self.size, self.stride)
        return viewed.requires_grad_(self.requires_grad)


def copy_tensor(t):
    requires_grad = t.requires_grad
    with torch.no_grad():
        t = t.detach()
        size, stride = tuple(t.shape), tuple(t.stride())
        if t.numel() == 0:
            return CopiedTensor(torch.empty(0, dtype=t.dtype), size, stride, str(t.device), requires_grad)
        span = 1 + sum((n - 1) * s for n, s in zip(size, stride))
        if span <= 2 * t.numel() + 4096:
            flat = t.as_strided((span,), (1,), t.storage_offset()).to("cpu", copy=True)
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


def copy_value(value):
    """A copy of an argument: tensors copied (also inside lists, tuples and dicts), anything else as it is."""
    if isinstance(value, torch.Tensor):
        return copy_tensor(value)
    if isinstance(value, (list, tuple)):
        copied = [copy_value(v) for v in value]
        return copied if isinstance(value, list) else tuple(copied)
    if isinstance(value, dict):
        return {k: copy_value(v) for k, v in value.items()}
    return value


def restore_value(value, device=None):
    """copy_value undone: every CopiedTensor a tensor again, where the test had it (or on device)."""
    if isinstance(value, CopiedTensor):
        return value.tensor(device)
    if isinstance(value, (list, tuple)):
        restored = [restore_value(v, device) for v in value]
        return restored if isinstance(value, list) else tuple(restored)
    if isinstance(value, dict):
        return {k: restore_value(v, device) for k, v in value.items()}
    return value


def tensors_in(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from tensors_in(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from tensors_in(v)


# -- signatures --------------------------------------------------------------------------------------

def layout_of(t):
    if any(s == 0 and n > 1 for n, s in zip(t.shape, t.stride())):
        return "stride-0"
    return "contiguous" if t.is_contiguous() else "non-contiguous"


def _signature_of_value(value):
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype).replace("torch.", ""), value.dim(), layout_of(value),
                value.is_floating_point() and value.requires_grad)
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_signature_of_value(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, _signature_of_value(v)) for k, v in value.items()))
    if value is None or isinstance(value, (str, bool)):  # a mode ("mean", causal=True) picks a code path
        return ("value", value)
    return ("type", type(value).__name__)   # numbers, dtypes, objects: their type alone


def signature_of(args, kwargs):
    return (tuple(_signature_of_value(a) for a in args),
            tuple((k, _signature_of_value(v)) for k, v in kwargs.items()))


def _describe_value(entry):
    kind, *rest = entry
    if kind == "tensor":
        dtype, rank, layout, wants_grad = rest
        words = [f"{dtype} {rank}-d"] + ([layout] if layout != "contiguous" else [])
        if dtype.startswith(("float", "bfloat")) and not wants_grad:
            words.append("(no grad)")
        return " ".join(words)
    if kind in ("list", "tuple"):
        inner = ", ".join(_describe_value(e) for e in rest[0])
        return f"[{inner}]" if kind == "list" else f"({inner})"
    if kind == "dict":
        return "{" + ", ".join(f"{k}: {_describe_value(e)}" for k, e in rest[0]) + "}"
    if kind == "value":
        return repr(rest[0])
    return rest[0]


def describe_signature(signature):
    """The signature in a few words: 'float32 2-d, float32 2-d stride-0 (no grad), 'mean', reduction=...'."""
    positional, keywords = signature
    words = [_describe_value(e) for e in positional] + [f"{k}={_describe_value(e)}" for k, e in keywords]
    return ", ".join(words)


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
    """One call of an op with a new signature, with copies of its arguments, waiting to be checked."""
    op: object               # the Function subclass or the CustomOpDef
    name: str
    args: tuple
    kwargs: dict
    no_grad: tuple           # positions and keywords of floating-point tensors that did not require grad
    signature: tuple
    test: str                # the nodeid of the test that made it

    @property
    def described(self):
        return describe_signature(self.signature)


def _no_grad_of(args, kwargs):
    """Where the test passed a floating-point tensor that wants no gradient (a target, a table): the checker
    passes it through as it is, as it does integers."""
    frozen = lambda v: isinstance(v, torch.Tensor) and v.is_floating_point() and not v.requires_grad  # noqa: E731
    return tuple([i for i, a in enumerate(args) if frozen(a)] + [k for k, v in kwargs.items() if frozen(v)])


def _recordable(tensors):
    """Plain strided tensors on a real device: no fake, functorch or distributed tensor subclass, no meta or sparse."""
    return all(type(t) in (torch.Tensor, torch.nn.Parameter) and t.layout == torch.strided and t.device.type != "meta"
               for t in tensors)


class Recorder:
    """Patches Function.apply and CustomOpDef.__call__ (install, uninstall) to record the calls a test makes.
    test: the nodeid of the test whose body runs (None: record nothing). quiet: above 0 while the checker runs
    (it calls the op many times) or while a call is copied."""

    def __init__(self, limit):
        self.limit = limit
        self.test = None
        self.quiet = 0
        self.pending = []           # RecordedCall, waiting for the end of the test
        self.signatures = {}        # op name: {signature: the test that first made it}, for the ops' first `limit`
        self.beyond_limit = {}      # op name: {signature}, seen after the first `limit`
        self.problems = []          # calls that could not be recorded, in words
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
            if recorder.test is not None and not recorder.quiet:
                recorder.consider(cls, args, kwargs)
            return original_apply.__get__(None, cls)(*args, **kwargs)

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
                if recorder.test is not None and not recorder.quiet and op._backward_fn is not None:
                    recorder.consider(op, args, kwargs)
                return original_call(op, *args, **kwargs)

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
        """Records the call if it is one to check; never raises (the test's own call goes on regardless)."""
        self.quiet += 1
        try:
            self._consider(op, args, kwargs)
        except Exception as error:  # noqa: BLE001  (recording must never break the test's call)
            self.problems.append(f"{self.test}: a call of {getattr(op, '__name__', op)} could not be recorded "
                                 f"({type(error).__name__}: {error})")
        finally:
            self.quiet -= 1

    def _consider(self, op, args, kwargs):
        if not torch.is_grad_enabled() or torch.compiler.is_compiling() or torch._C._are_functorch_transforms_active():
            return
        tensors = list(tensors_in((args, kwargs)))
        if not any(t.is_floating_point() and t.requires_grad for t in tensors) or not _recordable(tensors):
            return
        module, _ = _where_defined(op)
        if module.split(".")[0] in NOT_THE_SUITES:
            return
        name = op_name(op)
        signature = signature_of(args, kwargs)
        known = self.signatures.setdefault(name, {})
        if signature in known:
            return
        if len(known) >= self.limit:
            self.beyond_limit.setdefault(name, set()).add(signature)
            return
        copied_args, copied_kwargs = copy_value(tuple(args)), copy_value(dict(kwargs))
        known[signature] = self.test
        self.pending.append(RecordedCall(op, name, copied_args, copied_kwargs, _no_grad_of(args, kwargs), signature,
                                         self.test))

    def take_pending(self):
        pending, self.pending = self.pending, []
        return pending
