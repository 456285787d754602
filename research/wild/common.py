"""What every library's cases and sweep share: the Case and Sweep records, seeded inputs, the
Function lookup across releases, and the binding of arguments as .apply takes them.

A library's module (liger.py, fla.py, ...) defines CASES (its real bugs, each with a buggy and a
fixed release), their setup functions, SWEEP (a current release) and sweep_calls() (its public
Functions with torch references). Everything here runs in the child, inside the release's folder."""
import dataclasses
import importlib
import inspect


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    dist: str                 # the package's name on PyPI
    buggy: str
    fixed: str
    links: tuple
    trap_class: str           # the chapter's words
    expected: str             # the checker's trap name for the buggy release
    hid: str                  # how the bug hid: which test passed
    setup: str                # the function in the library's module that builds the call
    known: tuple = ()         # (trap, link): present in both releases, not this bug, an open issue
    fp32_inside: bool = False  # the kernels compute in fp32 whatever the input's dtype
    vendored: tuple = ()      # files taken from the release instead of installing it (see VENDORED)
    stubs: tuple = ()         # (module name, source): small modules written beside vendored files


@dataclasses.dataclass(frozen=True)
class Sweep:
    dist: str
    version: str
    vendored: tuple = ()      # as Case.vendored
    stubs: tuple = ()         # as Case.stubs
    loaded: str = "the wheel, installed whole"   # said on the page: how the release was loaded


VENDORED = """A library with a compiled extension, or an import too heavy for a test, is loaded as a user
who vendors its Triton op files would: only the files named (paths inside the release's wheel, or
its sdist where it has no wheel) are copied into the release's folder, each package folder above
them gets an empty __init__.py unless one is named, and each stub is written as a module beside
them. The kernels and Functions are the release's own, byte for byte."""


def randn(*shape, seed):
    import torch
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def targets(n, classes, seed):
    import torch
    return torch.randint(0, classes, (n,), generator=torch.Generator().manual_seed(seed))


def device():
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"


def positional(fn, args, kwargs):
    """args and kwargs bound to fn.forward's signature, defaults kept, as .apply takes them."""
    bound = inspect.signature(fn.forward).bind(None, *args, **kwargs)
    bound.apply_defaults()
    return list(bound.arguments.values())[1:]


def pad(reference, fn, args, kwargs):
    """reference returning one tensor, padded with None to as many outputs as fn returns."""
    import torch
    with torch.no_grad():
        out = fn.apply(*[a.to(device(), copy=True) if isinstance(a, torch.Tensor) else a
                         for a in positional(fn, args, kwargs)])
    count = len(out) if isinstance(out, tuple) else 1

    def padded(*a, **k):
        value = reference(*a, **k)
        return value if count == 1 else (value, *([None] * (count - 1)))
    padded.__name__ = getattr(reference, "__name__", "reference")
    return padded


def find(*paths):
    """The first of module:attr paths that imports (modules moved between releases)."""
    failures = []
    for path in paths:
        module, _, attr = path.partition(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as error:
            failures.append(f"{path}: {type(error).__name__}: {error}")
    raise ImportError("none of these imports: " + "; ".join(failures))
