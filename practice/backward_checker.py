"""
A backward checker that names the chapter's traps
=================================================

Point it at your own ``torch.autograd.Function`` (or any function of tensors that has a
reference) and it calls the op the ways autograd really calls it: with a random
``grad_output``, a uniform one, the layouts autograd hands on (after ``.sum()`` every stride
is 0; after ``torch.cat``, a narrow view; after a transpose, a transposed one), from two
consumers at once (fan-in), twice in a row, twice in one graph, beside a sibling that shares
its ``grad_output``, with each input frozen in turn, on inputs grown past several blocks,
and (if asked) under ``create_graph=True``. It reports each trap it finds, in the chapter's
terms, with the numbers::

    from backward_checker import check_backward
    report = check_backward(MyGELU, torch.randn(3, 5), reference=torch.nn.functional.gelu)
    report = check_backward(MyCrossEntropy, logits, target, reduction="none", eps=1e-6,
                            reference=my_torch_cross_entropy)
    print(report)                 # a few lines; report.clean is True when no trap was found

The forward's arguments are passed as the forward takes them: floating-point tensors get
gradients, integer tensors, numbers, strings and None pass through unchanged. Without a
reference it compares against finite differences, with a step that follows the precision
the op really computes in.

From a terminal, on a file that defines Functions (or imports them: name one with --function)::

    python practice/backward_checker.py my_ops.py [--function NAME] [--second-order]

(the package's own command, ``backward-check my_ops.py``, once it is installed: this script is that
command, run from the book's repository without installing anything).

The file is imported as Python runs a script, its own folder first on the import path, so it may
import the modules beside it. What the file may define, ``--help`` says (backward_check/cli.py's
FILE_HELP). Exit status: 0 when no Function has a trap, 1 when one does, 2 on a usage error (the other
Functions are still checked). Runs on a GPU, or on the CPU through Triton's interpreter.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "backward-check"))  # the package, beside practice/
# Importing the checker picks the backend (the GPU, or TRITON_INTERPRET=1) before the reader's file
# can import triton: Triton reads that switch once, when it is first imported.
from backward_check import (BACKEND, DEVICE, TRAPS, Finding, Report, Sample, UsageError,  # noqa: E402
                            check_backward)
from backward_check.cli import main, run  # noqa: E402  (the command line lives in the package)

__all__ = ["check_backward", "Sample", "Report", "Finding", "TRAPS", "UsageError", "DEVICE", "BACKEND", "main"]

if __name__ == "__main__":
    run()
