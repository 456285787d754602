"""
Build notebooks/chapter17.ipynb from the scripts: never edit the notebook by hand
=================================================================================

The notebook is one file that works alone: uploaded to Colab, Kaggle or any Jupyter,
it tells the chapter's story in order (17.1, 17.2, 17.3), draws each section's graph
from the live autograd objects, and ends by checking its own output against the
chapter's. Its code cells are taken verbatim from:

  04_standalone_complete.py          the backend choice, kernels, helpers, Functions, sections
  extras/autograd_diagram.py         the recorder and renderers, and the chapter's recordings
  expected_output/04_standalone_complete.txt   what the last cell compares against

so tests/test_notebook.py can prove the committed notebook is what this makes, and
tests/test_drift.py checks its kernels with every other copy.

    python tools/build_notebook.py            # (re)writes notebooks/chapter17.ipynb, without outputs
    python tools/build_notebook.py --check    # exit 1 if the committed notebook's cells differ

The committed notebook carries the outputs of an H200 run (tools/run_notebook.py);
--check compares cell sources only, so those outputs do not count as differences.
"""
import argparse
import ast
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK = REPO / "notebooks" / "chapter17.ipynb"
SCRIPT = REPO / "04_standalone_complete.py"
DIAGRAM = REPO / "extras" / "autograd_diagram.py"
EXPECTED = REPO / "expected_output" / "04_standalone_complete.txt"


def top_level_blocks(path):
    """{name: source} for each top-level statement of a file, with the comment lines just above it.
    Names: a def's or class's name, an assignment's target, "backend" for the backend `if`,
    "imports" for the imports before it and "triton imports" for those after."""
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    tree = ast.parse(text)
    blocks = {}
    previous_end = 0
    for node in tree.body:
        previous_start_end = previous_end
        start = (node.decorator_list[0].lineno if getattr(node, "decorator_list", None) else node.lineno) - 1
        first = start
        while first > previous_end and lines[first - 1].startswith("#") and not lines[first - 1].startswith("# ---"):
            first -= 1
        source = "".join(lines[first:node.end_lineno])
        previous_end = node.end_lineno
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            name = node.name
        elif isinstance(node, ast.Assign):
            name = ast.unparse(node.targets[0])
        elif isinstance(node, ast.If) and "DEVICE" in ast.unparse(node):
            name = "backend"
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            # Consecutive imports form one block, blank lines between them kept.
            name = "triton imports" if "backend" in blocks else "imports"
            source = (blocks[name] + "".join(lines[previous_start_end:first]) + source) if name in blocks else source
        else:
            name = f"statement {node.lineno}"
        blocks[name] = source
    return blocks


def kernel_names(path):
    """The @triton.jit functions of a file, in order."""
    return [node.name for node in ast.parse(path.read_text()).body if isinstance(node, ast.FunctionDef)
            and any(ast.unparse(d) == "triton.jit" for d in node.decorator_list)]


def between(path, start_marker, end_marker):
    """The lines of a file from the header block holding start_marker to the one holding end_marker."""
    lines = path.read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if start_marker in line) - 1
    end = next(i for i, line in enumerate(lines) if end_marker in line) - 1
    return "".join(lines[start:end]).rstrip() + "\n"


# The first cell: the environment as check_outputs.sh's header gives it, and the setup a
# notebook service needs. It installs nothing unless Triton is missing or known broken.
ENVIRONMENT_CELL = '''\
# The environment, as check_outputs.sh reports it, and the backend the kernels will use.
# The service's own PyTorch and Triton are used; the pinned pair is installed only where
# Triton is missing or known broken (and this cell says so).
import importlib.metadata
import importlib.util
import os
import subprocess
import sys

PINNED = ["torch==2.13.0", "triton==3.7.1", "numpy==2.4.6" if sys.version_info >= (3, 11) else "numpy==2.2.6"]


def version(package):
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def release(text):
    return tuple(int(part) for part in text.split(".")[:2]) if text else (0, 0)


if sys.platform == "darwin":
    raise SystemExit("Triton publishes no macOS packages, so its kernels cannot run here. Upload this notebook "
                     "to Colab or Kaggle, or use a Linux machine.")
triton_version = version("triton") or version("triton-windows")
install_why = None
if triton_version is None:
    install_why = "Triton is not installed"
elif release(triton_version) < (3, 2) and release(version("numpy")) >= (2, 0):
    # Only the interpreter is affected, but which backend runs is not known before torch loads.
    install_why = (f"Triton {triton_version}'s interpreter stores nothing under NumPy {version('numpy')} "
                   "(every number would be uninitialised memory)")
if install_why:
    if "torch" in sys.modules:
        raise SystemExit(f"{install_why}, and torch is already loaded: restart the kernel and run this cell first.")
    print(f"{install_why}: installing the pinned {', '.join(PINNED)} (a few GB on a GPU machine) ...")
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", *PINNED])
    triton_version = version("triton")

import torch  # noqa: E402

print(f"python   {sys.version.split()[0]} ({sys.executable})")
print(f"torch    {torch.__version__}")
print(f"triton   {triton_version}")
interpret_on = os.environ.get("TRITON_INTERPRET", "").lower() in ("1", "true", "yes", "y", "on")
if torch.cuda.is_available() and not interpret_on:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    print(f"device   {props.name}, compute capability {props.major}.{props.minor}, CUDA {torch.version.cuda}")
    if props.major < 7:
        # PyTorch refuses such a GPU for Triton ("Triton only supports devices of CUDA Capability
        # >= 7.0", torch/_inductor/exc.py): a P100 (6.0), Kaggle's other GPU, is one.
        os.environ["TRITON_INTERPRET"] = "1"
        print(f"         Triton supports compute capability 7.0 and newer, so on this {props.name} the kernels "
              "run in the Triton interpreter on the CPU instead; the output is the same. "
              "A T4 (Colab, Kaggle) runs them on the GPU.")
else:
    why = "TRITON_INTERPRET is set" if interpret_on else f"torch {torch.__version__} sees no GPU"
    print(f"numpy    {version('numpy')}")
    print(f"device   none ({why}): the Triton interpreter on the CPU")
'''

CAPTURE_CELL = '''\
# Each section's printed output is kept, so that the last cell can check it against the chapter.
import contextlib
import io

kept_output = {}


def run_section(name, section):
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        section()
    kept_output[name] = buffer.getvalue()
    print(kept_output[name], end="")
'''

DIAGRAM_DISPLAY_CELL = '''\
# Draws recordings as text, and as SVG where the graphviz package and its dot binary are
# present (as on Colab).
import shutil


def show(recordings):
    for recording in recordings:
        print(render_ascii(recording))
        try:
            import graphviz
        except ImportError:
            continue
        if shutil.which("dot"):
            from IPython.display import display
            display(graphviz.Source(render_dot(recording)))
'''

CHECK_CELL_TEMPLATE = '''\
# The notebook's own output against the chapter's Expected Output for 04_standalone_complete.py,
# section by section, with memory addresses masked as check_outputs.sh masks them.
import difflib
import re

EXPECTED = {expected!r}


def masked(text):
    return re.sub(r"0x[0-9a-fA-F]+", "0x<address>", text)


expected_sections = dict(zip(("17.1", "17.2", "17.3"), EXPECTED.split("\\n\\n")))
passed = failed = 0
for name, expected in expected_sections.items():
    actual = kept_output.get(name, "(the section's cell did not run)").strip("\\n")
    if masked(actual) == masked(expected.strip("\\n")):
        passed += 1
        print(f"PASS  {{name}}")
    else:
        failed += 1
        print(f"FAIL  {{name}}")
        print("".join(difflib.unified_diff(expected.strip("\\n").splitlines(True), actual.splitlines(True),
                                           "expected", "this notebook")))
print(f"{{passed}} passed, {{failed}} failed")
'''


def markdown(text):
    return {"cell_type": "markdown", "metadata": {}, "source": text.strip("\n")}


def code(text):
    return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": text.rstrip("\n")}


def cells():
    script = top_level_blocks(SCRIPT)
    diagram_code = ("import dataclasses\nimport math\n\n" + between(DIAGRAM, "# Recording: the graph", "# Scale: ")
                    ).replace("\n\n\n\n", "\n\n\n")
    return [
        markdown("""
# Chapter 17: How PyTorch's Autograd Engine Chains Custom Ops

The chapter's code in one notebook: upload this file to Google Colab (a T4 GPU:
*Runtime > Change runtime type*), to Kaggle, or open it in any Jupyter, and run the cells
in order. The kernels run on the GPU when PyTorch sees one, and in Triton's interpreter
on the CPU otherwise, with the same output. The last cell checks that output against
the chapter's.

This notebook is generated from the companion's scripts (`tools/build_notebook.py`); its
code cells are `04_standalone_complete.py` and `extras/autograd_diagram.py` verbatim.
"""),
        markdown("""
## Where am I running?

What a bug report needs: versions, the GPU and its compute capability, or why the kernels
will run in the interpreter instead.
"""),
        code(ENVIRONMENT_CELL),
        markdown("""
## The kernels and the `autograd.Function`s

The backend is chosen before Triton is imported (the interpreter is switched on through
the environment). Then Chapter 16's kernels: GELU forward and backward, the buggy
backward that never multiplies by `grad_output`, and square. The launch helpers refuse
what the kernels cannot handle, and the three Functions wrap the kernels; `TritonGELU`
and `TritonSquare` record each backward call, as the chapter's listing does.
"""),
        code(script["imports"] + "\n" + script["backend"] + "\n\n" + script["triton imports"]),
        code("\n\n\n".join(script[name].strip("\n") for name in kernel_names(SCRIPT))),
        code("\n\n\n".join(script[name].strip("\n") for name in
                           ("KERNEL_DTYPES", "kernel_operands", "device_of", "no_double_backward", "_launch",
                            "_launch_bwd"))),
        code(script["call_order"].strip("\n") + "\n" + script["captured_grads"].strip("\n") + "\n\n\n"
             + "\n\n\n".join(script[name].strip("\n") for name in ("TritonGELU", "TritonGELUBuggy", "TritonSquare"))),
        markdown("""
## Drawing the graph from the live objects

The chapter's diagrams are drawn by hand. This recorder (`extras/autograd_diagram.py`)
walks `loss.grad_fn` through `next_functions`, hooks every node, and runs the backward:
for each node, the order the engine called it, the `grad_output` it received, and what
it sent along each edge. `chapter_recordings()` records the chapter's five graphs.
"""),
        code(diagram_code),
        code(CAPTURE_CELL + "\n\n" + DIAGRAM_DISPLAY_CELL),
        markdown("""
## 17.1 What does `grad_output` look like inside a real expression?

`TritonGELU` inside `2 * z + 1`, not alone under `.sum()`. Look for the `grad_output`
that reaches `TritonGELU`'s node: uniformly **2**, not 1. And the buggy backward, which
never multiplies by `grad_output`, no longer matches the oracle: nobody built a special
test input, the `* 2` did it.
"""),
        code(script["section_17_1"].strip("\n") + '\n\n\nrun_section("17.1", section_17_1)'),
        markdown("""
The same two runs as the engine saw them. In the correct chain, `TritonGELUBackward`
receives 2 and sends twice the local derivative; in the buggy chain it receives the same 2
and sends the local derivative alone: exactly half. The hand-drawn diagram shows `* 2, + 1`
as one step; autograd records a `MulBackward0` and an `AddBackward0`, and the constants
(`2`, `1`) as `None` edges.
"""),
        code("recordings = chapter_recordings()\nshow(recordings[:2])"),
        markdown("""
## 17.2 In what order does backward run, and how is the graph wired?

`TritonGELU`, then `TritonSquare`. Look for `y.grad_fn.next_functions[0][0] is z.grad_fn`
being `True` (the very same object, not a look-alike), and for the call order:
`TritonSquare.backward` first, then `TritonGELU.backward`, the reverse of the forward.
"""),
        code(script["section_17_2"].strip("\n") + '\n\n\nrun_section("17.2", section_17_2)'),
        markdown("""
The drawing goes from `loss.grad_fn` straight to `TritonSquareBackward`; the live graph
has a `SumBackward0` in front, called first.
"""),
        code("show(recordings[2:3])"),
        markdown("""
## 17.3 What does a backward receive when its output is used twice?

`z` feeds the loss through two consumers. Look for one call to `TritonGELU.backward`,
with the contributions already summed: 2 for `z.sum() + z.sum()`, 5 for
`(2 * z).sum() + (3 * z).sum()`.
"""),
        code(script["section_17_3"].strip("\n") + '\n\n\nrun_section("17.3", section_17_3)'),
        markdown("""
Each consumer has a `MulBackward0` and a `SumBackward0` of its own, joined by an
`AddBackward0`. The recording shows each contribution and their sum arriving at one call
of `TritonGELUBackward`, in the order the engine delivered them.
"""),
        code("show(recordings[3:])"),
        markdown("""
## Does this machine reproduce the chapter?

The output above, section by section, against the chapter's *Expected Output*, as
`check_outputs.sh` checks the scripts.
"""),
        code(CHECK_CELL_TEMPLATE.format(expected=EXPECTED.read_text())),
    ]


def build():
    notebook_cells = cells()
    for i, cell in enumerate(notebook_cells):
        cell["id"] = f"cell-{i:02d}"
    return {
        "cells": notebook_cells,
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def sources(notebook):
    """What --check compares: each cell's type and source, not its outputs."""
    def text(source):
        return "".join(source) if isinstance(source, list) else source
    return [(cell["cell_type"], text(cell["source"])) for cell in notebook["cells"]]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed notebook; write nothing")
    parser.add_argument("--output", type=Path, default=NOTEBOOK, help="default: notebooks/chapter17.ipynb")
    args = parser.parse_args(argv)
    notebook = build()
    if args.check:
        committed = json.loads(args.output.read_text())
        if sources(committed) != sources(notebook):
            print(f"{args.output} differs from what tools/build_notebook.py makes from the scripts: regenerate it "
                  "(python tools/build_notebook.py), then run it on a GPU (tools/run_notebook.py)", file=sys.stderr)
            return 1
        print(f"{args.output}: every cell is what the scripts make")
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
