"""The command line: check the backward of each autograd.Function a Python file defines.

    backward-check my_ops.py [--function NAME] [--second-order]

(installed with the package; in the book's repository, ``python practice/backward_checker.py`` is the same
command). The file is imported as Python runs a script, its own folder first on the import path, so it may import
the modules beside it; what it may define (example inputs, a reference, no_grad) is in FILE_HELP, which --help
prints. Exit status: 0 when no Function has a trap, 1 when one does, 2 on a usage error (the other Functions are
still checked)."""
import argparse
import importlib.util
import inspect
import os
import re
import sys
from pathlib import Path

import torch

# Importing the package picks the backend (the GPU, or TRITON_INTERPRET=1) before the user's file can import
# triton: Triton reads that switch once, when it is first imported.
from . import DEVICE, Sample, UsageError, check_backward
from .calling import _forward_parameters, clip
from .report import CRASHES
from .runner import FORWARD
from .checks.truth import DIRECTIONS, FD_MAX_CALLS, FD_MAX_S

__all__ = ["main", "run"]

DESCRIPTION = """\
Check the backward of each autograd.Function a file defines: call it the ways autograd
really calls it (random, uniform, stride-0 and narrow-view grad_outputs, fan-in, each
input frozen, inputs grown past several blocks, backward twice) and name each trap found,
against the file's reference or finite differences."""

FILE_HELP = f"""\
what the file may define, for each Function (a usage error points here):
  example_inputs  a function returning the forward's arguments: a tuple of positional
                  arguments, or a dict of keyword arguments (or a dict of such functions
                  keyed by Function name). Without it, the checker makes up a random 3x5
                  tensor for each parameter annotated as a tensor (and for a forward that
                  takes one unannotated parameter), and keeps every default; it cannot
                  make up numbers, strings or several unannotated parameters.
  reference       the same op in differentiable torch ops, taking the same arguments (or a
                  dict keyed by Function name). Without it, finite differences: element
                  by element up to {FD_MAX_CALLS:,} calls of the op (about {FD_MAX_CALLS // 4:,} input elements),
                  along {sum(DIRECTIONS.values())} random directions past that; an op too slow for them in
                  {FD_MAX_S / 60:.0f} minutes needs a reference.
  no_grad         the names of floating-point arguments the op takes no gradient for (a
                  rotary cos/sin table, a running statistic): the checker never changes them.
A Function may instead carry its own example_inputs, reference and no_grad as static
methods or class attributes. The file is imported with its own folder on the import
path, so it may import the modules beside it. A report counts the op's outputs from 0,
as Python indexes what forward returns: output 0 is the first.
Exit status: 0 no trap found, 1 a trap found, 2 a usage error.
"""
# A report names the op's outputs by their index in what forward returns.
OUTPUT_NUMBERED = re.compile(r"\boutput \d+\b")
OUTPUTS_FROM_0 = "  (outputs are counted from 0, as Python indexes what forward returns: output 0 is the first)"


def functions_in(module):
    """(defined, imported): the Function subclasses the file's namespace holds, by name: those it defines, and
    those it imports (torch's own aside)."""
    defined, imported = {}, {}
    for name, obj in vars(module).items():
        if (isinstance(obj, type) and issubclass(obj, torch.autograd.Function)
                and obj.__module__.split(".")[0] != "torch"):
            (defined if obj.__module__ == module.__name__ else imported)[name] = obj
    return defined, imported


def provided(module, function, name, attribute):
    """The Function's own `attribute`, else the file's (a dict keyed by Function name, or one for all)."""
    own = inspect.getattr_static(function, attribute, None)
    if own is not None:
        return getattr(function, attribute)
    value = getattr(module, attribute, None)
    if isinstance(value, dict):
        return value.get(name)
    return value


# "int": an annotation as `from __future__ import annotations` leaves it, a string
NOT_TENSORS = (int, float, str, bool, "int", "float", "str", "bool")
TENSORS = (torch.Tensor, "torch.Tensor", "Tensor")


def default_inputs(function, name):
    """A random 3x5 tensor for each parameter without a default that is a tensor: annotated as one, or the
    only unannotated one; the defaults kept. A number, a string or several unannotated parameters (an
    `eps` beside `x`?) cannot be made up: that is a usage error, not a guess."""
    needed = [p for p in _forward_parameters(function)
              if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    unannotated = [p.name for p in needed if p.annotation is inspect.Parameter.empty]
    for p in needed:
        if p.annotation in NOT_TENSORS or (p.annotation not in TENSORS and p.annotation is not inspect.Parameter.empty):
            spelled = getattr(p.annotation, "__name__", p.annotation)
            raise UsageError(f"{name}.forward needs `{p.name}: {spelled}`, which the checker cannot "
                             f"invent: define example_inputs() in the file (see --help)")
    if len(unannotated) > 1:
        raise UsageError(f"{name}.forward takes {', '.join(f'`{n}`' for n in unannotated)} with neither an annotation "
                         f"nor a default, so the checker cannot tell tensors from numbers: annotate them "
                         f"(x: torch.Tensor) or define example_inputs() in the file (see --help)")
    args = [torch.randn(3, 5, generator=torch.Generator(device="cpu").manual_seed(11 + k), device="cpu").to(DEVICE)
            for k, _ in enumerate(needed)]
    return tuple(args), {}


def inputs_for(module, function, name):
    make = provided(module, function, name, "example_inputs")
    if make is None:
        return default_inputs(function, name)
    try:
        made = make() if callable(make) else make
    except Exception as error:  # noqa: BLE001  (the reader's example_inputs failed, not the checker)
        raise UsageError(f"example_inputs for {name} raised {type(error).__name__}: {clip(error, 160)}") from None
    if isinstance(made, dict):
        return (), made
    if isinstance(made, (tuple, list)):
        return tuple(made), {}
    if isinstance(made, torch.Tensor):
        return (made,), {}
    raise UsageError(f"example_inputs for {name} returned a {type(made).__name__}: return a tuple of positional "
                     f"arguments or a dict of keyword arguments")


def load(path):
    """The file, imported as Python runs a script: its own folder first on the import path."""
    if path.suffix != ".py":  # Python imports nothing else as a script (a notebook: export it as a .py first)
        raise UsageError(f"{path} is not a Python file (.py): the command imports the file as Python runs a "
                         f"script" + ("; export the notebook as one (jupyter nbconvert --to script)"
                                      if path.suffix == ".ipynb" else ""))
    sys.path.insert(0, str(path.resolve().parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # noqa: BLE001  (the reader's file, not the checker, failed)
        raise UsageError(f"could not import {path}: {type(error).__name__}: {clip(error, 200)}") from None
    return module


def main(argv=None, prog=None):
    """The command line: the exit status (0 no trap, 1 a trap, 2 a usage error). prog: the name errors start with
    (default: the script's, as argparse takes it)."""
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION, epilog=FILE_HELP,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file", type=Path, help="a Python file defining (or importing) torch.autograd.Function "
                                                "subclasses")
    parser.add_argument("--function", action="append", metavar="NAME",
                        help="check only this one, defined in the file or imported by it (repeatable)")
    parser.add_argument("--second-order", action="store_true", help="also check create_graph=True")
    args = parser.parse_args(argv)
    if not args.file.is_file():
        parser.error(f"no such file: {args.file}")
    try:
        module = load(args.file)
        defined, imported = functions_in(module)
        found = {**imported, **defined}
        chosen = args.function or list(defined)
        imports = f" and imports {sorted(imported)}" if imported else ""
        missing = [n for n in chosen if n not in found]
        if missing:
            raise UsageError(f"{args.file} defines or imports no Function named {missing}; it defines "
                             f"{sorted(defined)}{imports}")
        if not chosen:
            raise UsageError(f"{args.file} defines no torch.autograd.Function" +
                             (f" (it imports {sorted(imported)}: name one with --function)" if imported else ""))
    except UsageError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
    trapped = misused = 0
    for name in chosen:  # one Function's usage error does not stop the others
        try:
            positional, keywords = inputs_for(module, found[name], name)
            report = check_backward(found[name], Sample(*positional, **keywords),  # the op's own, whatever their names
                                    reference=provided(module, found[name], name, "reference"),
                                    second_order=args.second_order, name=name,
                                    no_grad=provided(module, found[name], name, "no_grad") or ())
            invented = provided(module, found[name], name, "example_inputs") is None
            refused = [f.evidence for f in report.all_findings if f.trap is CRASHES and f.check == FORWARD]
            if invented and refused:  # the op's refusal of tensors the checker made up is no finding on the op
                raise UsageError(f"the forward refused the 3x5 tensors the checker made up for its parameters "
                                 f"({clip(refused[0], 160)}): define example_inputs() in the file (see --help)")
        except UsageError as error:
            print(f"{parser.prog}: error: {name}: {error}", file=sys.stderr)
            misused += 1
            continue
        except Exception as error:  # noqa: BLE001  (the checker's own failure: one line, never a traceback)
            print(f"{parser.prog}: error: {name}: the checker itself failed ({type(error).__name__}: "
                  f"{clip(error, 200)}); please report it with the file", file=sys.stderr)
            misused += 1
            continue
        print(report, flush=True)
        if OUTPUT_NUMBERED.search(str(report)):
            print(OUTPUTS_FROM_0, flush=True)
        trapped += not report.clean
    return 2 if misused else 1 if trapped else 0


def run(argv=None, prog=None):
    """main, then leave without tearing the interpreter down: the autograd engine's device threads, which call into
    the Python backwards checked here, can abort the process during that teardown (pytorch/pytorch#38228; seen on an
    H200: "terminate called without an active exception", exit 134, after every report was out)."""
    status = main(argv, prog)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def console():
    """The `backward-check` command (the package's console script)."""
    run(prog="backward-check")


if __name__ == "__main__":
    run(prog="python -m backward_check.cli")
