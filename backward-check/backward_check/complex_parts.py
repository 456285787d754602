"""Complex arguments and outputs, checked as their real and imaginary parts.

PyTorch's convention for complex gradients: for a real loss L of a complex z = x + iy, z.grad is
dL/dx + i dL/dy (the conjugate Wirtinger derivative dL/dz*, times two), which torch.autograd.gradcheck checks.
The checker checks exactly that by handing its checks the op as a function of real tensors:

- each complex argument z becomes torch.view_as_real(z), a real tensor whose last dimension (of 2) holds the real
  and the imaginary part, rebuilt into z with torch.complex for every call;
- each complex output is handed back as torch.view_as_real of it.

autograd's own backward of those two steps carries the convention, so every check of values (finite differences,
a reference, grad_output's values, two uses, state between calls) reads the op's complex gradient as PyTorch
defines it, and a backward that forgets a conjugate is a wrong formula. What it cannot see: the layouts of the
complex tensors themselves (each call rebuilds them contiguous, and view_as_real's backward makes grad_output
contiguous), writes into them, and the op's backward called directly.
"""
import inspect

import torch

from .calling import PARTS_ATTRIBUTE, UsageError, _signature_of, is_function, read_by
from .report import COMPLEX_PARTS, Note

NOTE_CHECK = "complex values"


def takes_complex(args, kwargs):
    """Whether any argument is a complex tensor."""
    return any(isinstance(v, torch.Tensor) and v.is_complex() for v in (*args, *kwargs.values()))


def parts(z):
    """z's real and imaginary parts, side by side in a new last dimension (requiring grad where z does)."""
    return torch.view_as_real(z.detach().resolve_conj()).clone().requires_grad_(z.requires_grad)


def rebuilt(t):
    """The complex tensor whose parts t holds (its first two entries along the last dimension)."""
    return torch.complex(t[..., 0], t[..., 1])


def real_outputs(out):
    """What the op returned, each complex tensor in it handed back as its real and imaginary parts."""
    if isinstance(out, torch.Tensor):
        return torch.view_as_real(out.resolve_conj()) if out.is_complex() else out
    if isinstance(out, (tuple, list)):
        return type(out)(real_outputs(o) for o in out)
    if isinstance(out, dict):
        return {k: real_outputs(v) for k, v in out.items()}
    return out


def _complex_places(args, kwargs):
    return ({i for i, v in enumerate(args) if isinstance(v, torch.Tensor) and v.is_complex()},
            {k for k, v in kwargs.items() if isinstance(v, torch.Tensor) and v.is_complex()})


def _as_called(fn, positions, keywords):
    """fn taking the real parts where the caller passed complex tensors at positions and keywords, called as the
    checker calls a reference: the positional arguments in their places, the others by name."""
    def on_parts(*args, **kwargs):
        args = [rebuilt(a) if i in positions else a for i, a in enumerate(args)]
        kwargs = {k: rebuilt(v) if k in keywords else v for k, v in kwargs.items()}
        return real_outputs(fn(*args, **kwargs))
    return on_parts


def _as_bound(fn, signature, names):
    """fn (a Function, through apply) taking the real parts for the parameters named names: the checker binds the
    op's signature, so the parameters are told by name (for *args, by name and index)."""
    call = fn.apply if is_function(fn) else fn

    def on_parts(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        for name, value in bound.arguments.items():
            kind = signature.parameters[name].kind
            if kind is inspect.Parameter.VAR_POSITIONAL:
                bound.arguments[name] = tuple(rebuilt(v) if (name, i) in names else v for i, v in enumerate(value))
            elif kind is inspect.Parameter.VAR_KEYWORD:
                bound.arguments[name] = {k: rebuilt(v) if (k, None) in names else v for k, v in value.items()}
            elif (name, None) in names:
                bound.arguments[name] = rebuilt(value)
        return real_outputs(call(*bound.args, **bound.kwargs))
    on_parts.__signature__ = signature
    return on_parts


def _complex_names(signature, args, kwargs):
    """(parameter name, index in *args or None) of every complex tensor argument, as the signature binds them."""
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as error:
        raise UsageError(f"{signature} cannot take these arguments: {error}") from None
    names = set()
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            names |= {(name, i) for i, v in enumerate(value) if isinstance(v, torch.Tensor) and v.is_complex()}
        elif kind is inspect.Parameter.VAR_KEYWORD:
            names |= {(k, None) for k, v in value.items() if isinstance(v, torch.Tensor) and v.is_complex()}
        elif isinstance(value, torch.Tensor) and value.is_complex():
            names.add((name, None))
    return names


def on_real_parts(fn, args, kwargs, reference=None):
    """(fn, args, kwargs, reference, note) for checking fn on the real parts of its complex arguments and outputs:
    the op and reference as functions of real tensors, their arguments with each complex tensor as its parts, and
    the note that says so. UsageError where a function argument reads a complex tensor (the checker could not write
    its values into it)."""
    read = {id(t) for v in (*args, *kwargs.values()) if callable(v) and not isinstance(v, torch.Tensor)
            for t in read_by(v)}
    shared = [v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor) and v.is_complex() and id(v) in read]
    if shared:
        raise UsageError("a function argument reads a complex tensor the op is also passed, and the checker checks "
                         "complex tensors through copies of their real and imaginary parts: check it with "
                         "torch.autograd.gradcheck")
    positions, keywords = _complex_places(args, kwargs)
    signature = _signature_of(fn)
    if signature is not None:
        op = _as_bound(fn, signature, _complex_names(signature, args, kwargs))
    else:
        op = _as_called(fn.apply if is_function(fn) else fn, positions, keywords)
    op.__name__ = getattr(fn, "__name__", getattr(fn, "_qualname", type(fn).__name__))
    on_parts = None if reference is None else _as_called(reference, positions, keywords)
    real_args = tuple(parts(a) if i in positions else a for i, a in enumerate(args))
    real_kwargs = {k: parts(v) if k in keywords else v for k, v in kwargs.items()}
    # the checker's names for them (its Slot names), in the op's order: its checks never grow their parts' dimension
    if signature is None:
        parted = [*(f"argument {i}" for i in sorted(positions)), *sorted(keywords)]
    else:
        order = list(signature.parameters)
        parted = [name if index is None else f"{name}[{index}]" for name, index in
                  sorted(_complex_names(signature, args, kwargs), key=lambda n: (order.index(n[0]) if n[0] in order
                                                                                 else len(order), n[1] or 0))]
    setattr(op, PARTS_ATTRIBUTE, frozenset(parted))
    names = [f"`{n}`" for n in parted]
    note = Note(NOTE_CHECK, f"{', '.join(names) or 'its outputs'} checked as real and imaginary parts (PyTorch's "
                            f"convention: a complex z's gradient is dL/d(real z) + i dL/d(imag z)); the complex "
                            f"tensors' own layouts, and the backward called directly, are not checked",
                COMPLEX_PARTS)
    return op, real_args, real_kwargs, on_parts, note
