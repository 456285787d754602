"""
Build notebooks/chapter17.ipynb from the scripts: never edit the notebook by hand
=================================================================================

The notebook is one file that works alone: uploaded to Colab, Kaggle or any Jupyter,
it tells the chapter's story in order (17.1, 17.2, 17.3), each section's result before
any long cell, then draws each section's graph from the live autograd objects, and ends
with the chapter's facts, its self-check questions, and a check of its own output
against the chapter's. Its code cells are taken verbatim from:

  04_standalone_complete.py          the book's code: backend choice, kernels, helpers, Functions, sections
  extras/autograd_diagram.py         the recorder and renderers (a collapsed cell), and the chapter's recordings
  expected_output/*.txt              what the last cell compares against

so tests/test_notebook.py can prove the committed notebook is what this makes, and
tests/test_drift.py checks its kernels with every other copy.

    python tools/build_notebook.py            # (re)writes notebooks/chapter17.ipynb, without outputs
    python tools/build_notebook.py --check    # exit 1 if the committed notebook's cells differ, 2 if it is none

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
EXPECTED_DIR = REPO / "expected_output"


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


# The first code cell: what a bug report needs, and Triton where the service lacks it.
ENVIRONMENT_CELL = '''\
# Versions and device. Colab and Kaggle ship PyTorch and Triton; elsewhere Triton is installed.
import importlib.util, os, subprocess, sys  # noqa: E401

if importlib.util.find_spec("triton") is None:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "triton"])
import torch  # noqa: E402
import triton  # noqa: E402  (imported only to report its version; the backend is chosen below)

print(f"python {sys.version.split()[0]}, torch {torch.__version__}, triton {triton.__version__}")
if torch.cuda.is_available():
    major, minor = torch.cuda.get_device_capability()
    print(f"GPU: {torch.cuda.get_device_name()}, compute capability {major}.{minor}")
    if major < 7:  # Triton needs 7.0 or newer (a P100 is 6.0): run the kernels in its interpreter
        os.environ["TRITON_INTERPRET"] = "1"
        print("Triton supports compute capability 7.0 and newer: the kernels run in its interpreter instead")
else:
    print("no GPU: the kernels run in Triton's interpreter on the CPU, with the same output")
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
# The notebook's own output against the chapter's: 04_standalone_complete.py's Expected Output, section
# by section, and the lines of 01 and 02 it printed besides, memory addresses masked as check_outputs.sh does.
import difflib
import re

EXPECTED = {expected!r}


def masked(text):
    return re.sub(r"0x[0-9a-fA-F]+", "0x<address>", text)


passed = failed = 0
for name, expected in EXPECTED.items():
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


def collapsed(text):
    """A code cell shown folded: Colab's form view (#@title), and JupyterLab, Notebook 7 and VS Code."""
    cell = code(text)
    cell["metadata"] = {"cellView": "form", "jupyter": {"source_hidden": True}}
    return cell


def expected_sections():
    """What the last cell compares each kept output with, from expected_output/."""
    section_17_1, section_17_2, section_17_3 = (EXPECTED_DIR / "04_standalone_complete.txt").read_text().split("\n\n")
    lines_01 = (EXPECTED_DIR / "01_chained_expression.txt").read_text().splitlines()
    lines_02 = (EXPECTED_DIR / "02_graph_structure.txt").read_text().splitlines()
    return {"17.1": section_17_1, "17.1.2": "\n".join(l for l in lines_01 if " chain x.grad:" in l),
            "17.2": section_17_2, "17.2.1": "\n".join(l for l in lines_02 if l.startswith(("y.grad_fn", "z.grad_fn"))),
            "17.3": section_17_3}


WORKED_EXAMPLE_17_1_2 = '''\
# Worked Example 17.1.2 prints the two gradients themselves (not part of 04's output).
def gradients_17_1_2():
    torch.manual_seed(3)
    x = torch.randn(6).to(DEVICE).requires_grad_(True)
    x_buggy = x.detach().clone().requires_grad_(True)
    (2 * TritonGELU.apply(x) + 1).sum().backward()
    (2 * TritonGELUBuggy.apply(x_buggy) + 1).sum().backward()
    print("buggy chain x.grad:  ", x_buggy.grad.cpu())
    print("correct chain x.grad:", x.grad.cpu())


run_section("17.1.2", gradients_17_1_2)
'''

WORKED_EXAMPLE_17_2_1 = '''\
# Worked Example 17.2.1 prints the graph itself, as 02_graph_structure.py does (not part of 04's output).
def graph_17_2_1():
    torch.manual_seed(4)
    x = torch.randn(4).to(DEVICE).requires_grad_(True)
    z = TritonGELU.apply(x)
    y = TritonSquare.apply(z)
    print("y.grad_fn:", y.grad_fn)
    print("y.grad_fn.next_functions:", y.grad_fn.next_functions)
    print("z.grad_fn:", z.grad_fn)
    print("z.grad_fn.next_functions:", z.grad_fn.next_functions)


run_section("17.2.1", graph_17_2_1)
'''

SUMMARY = """
## What the chapter showed, in this notebook's numbers

- **17.1** Inside `2 * z + 1`, the `grad_output` reaching `TritonGELU`'s backward is uniformly
  **2**, made by the `* 2` downstream. Chapter 16's buggy backward, which ignores it, gives
  exactly **half** the correct gradient, with no hand-built test input.
- **17.2** `y.grad_fn.next_functions[0][0] is z.grad_fn`: the graph's edges are the very
  node objects. Backward runs in reverse: `TritonSquare.backward` first, then `TritonGELU.backward`.
- **17.3** A value used twice gets **one** backward call, with the contributions already
  summed: 1 + 1 = 2, and 3 + 2 = 5.

## Self-check questions (the chapter's five)

1. Chapter 16's Worked Example 16.1.2 built `grad_output = [2.0, 2.0, 2.0]` by hand. Which
   ordinary-looking line of this chapter produces the same value automatically, and why?
2. After `z = TritonGELU.apply(x)` and `y = TritonSquare.apply(z)`, in what order does the
   backward pass call the two backward methods, and what must be true first?
3. What does `y.grad_fn.next_functions[0][0] is z.grad_fn` being `True` confirm?
4. With `loss = z.sum() + z.sum()`, how many times is `TritonGELU.backward` called, and what
   does its `grad_output` hold?
5. Why must a custom backward never assume its `grad_output` reflects exactly one "clean"
   downstream use of its output?

Each answer is printed above: 1 in 17.1, 2 and 3 in 17.2, 4 and 5 in 17.3.
"""


def cells():
    script = top_level_blocks(SCRIPT)
    joined = lambda *names: "\n\n\n".join(script[name].strip("\n") for name in names)  # noqa: E731
    recorder = ("# @title The recorder: hooks on every node of a live autograd graph (double-click to show the code)\n"
                "import dataclasses\nimport math\nimport threading\n\n"
                + between(DIAGRAM, "# Recording: the graph", "# Scale: ")).replace("\n\n\n\n", "\n\n\n")
    return [
        markdown("""
# Chapter 17: How PyTorch's Autograd Engine Chains Custom Ops

The chapter's code, run cell by cell. Upload this file to Google Colab (a T4 GPU:
*Runtime > Change runtime type*), to Kaggle, or open it in any Jupyter, and run the cells
in order. On a GPU the kernels run there; without one, in Triton's interpreter on the
CPU, with the same output.

What you will see:
- the `grad_output` reaching `TritonGELU`'s backward inside `2 * z + 1` is uniformly **2**;
- Chapter 16's buggy backward gives exactly **half** the correct gradient there;
- `TritonSquare`'s backward runs **first**, though its forward ran second;
- a value used twice gets **one** backward call, receiving **3 + 2 = 5**.

The code cells are the book's code (`04_standalone_complete.py`: the printed listing,
plus the lines that choose the GPU or the interpreter). The last cell checks this
notebook's output against the chapter's.
"""),
        code(ENVIRONMENT_CELL),
        code(CAPTURE_CELL),
        markdown("""
## 17.1 What does `grad_output` look like inside a real expression?

First the kernels and Functions, as the chapter prints them. The backend is chosen before
Triton is imported, because the interpreter is switched on through the environment.
"""),
        code(script["imports"] + "\n" + script["INTERPRET"] + script["backend"] + "\n\n" + script["triton imports"]),
        code(joined("gelu_forward_kernel")),
        code(joined("gelu_backward_kernel")),
        code(joined("gelu_backward_kernel_buggy_no_chain_rule")),
        code(joined("_launch", "_launch_bwd")),
        code(script["call_order"].strip("\n") + "\n" + script["captured_grads"].strip("\n") + "\n\n\n"
             + joined("TritonGELU", "TritonGELUBuggy")),
        markdown("""
`TritonGELU` inside `2 * z + 1`, not alone under `.sum()`. Look for the `grad_output` that
reaches `TritonGELU`'s node: uniformly **2**, not 1. And the buggy backward, which never
multiplies by `grad_output`, no longer matches the oracle.
"""),
        code(script["section_17_1"].strip("\n") + '\n\n\nrun_section("17.1", section_17_1)'),
        markdown("The two gradients themselves: the buggy one is exactly half the correct one, the missing `* 2`."),
        code(WORKED_EXAMPLE_17_1_2),
        markdown("""
## 17.2 In what order does backward run, and how is the graph wired?

`TritonGELU`, then `TritonSquare`. Look for `y.grad_fn.next_functions[0][0] is z.grad_fn`
being `True` (the very same object, not a look-alike), and for the call order:
`TritonSquare.backward` first, then `TritonGELU.backward`, the reverse of the forward.
"""),
        code(joined("square_forward_kernel")),
        code(joined("square_backward_kernel")),
        code(joined("TritonSquare")),
        code(script["section_17_2"].strip("\n") + '\n\n\nrun_section("17.2", section_17_2)'),
        markdown("The raw objects, as Worked Example 17.2.1 prints them: `y`'s node points at `z`'s node, "
                 "which points at the `AccumulateGrad` that writes `x.grad`."),
        code(WORKED_EXAMPLE_17_2_1),
        markdown("""
## Drawing the graph from the live objects

The chapter draws its graphs by hand. The collapsed cell below holds a recorder
(`extras/autograd_diagram.py`) that walks `loss.grad_fn` through `next_functions`, hooks
every node, and runs the backward: for each node, the order the engine called it, the
`grad_output` it received, and what it sent along each edge. Run it; open it if you are curious.
"""),
        collapsed(recorder),
        code(DIAGRAM_DISPLAY_CELL),
        markdown("""
17.1 and 17.2 as the engine saw them. In the correct chain `TritonGELUBackward` receives 2
and sends twice the local derivative; in the buggy chain it receives the same 2 and sends
the local derivative alone. The hand-drawn `* 2, + 1` is a `MulBackward0` and an
`AddBackward0`. In 17.2, a `SumBackward0` runs before `TritonSquareBackward`.
"""),
        code("recordings = chapter_recordings()\nshow(recordings[:3])"),
        markdown("""
## 17.3 What does a backward receive when its output is used twice?

`z` feeds the loss through two consumers. Look for one call to `TritonGELU.backward`,
with the contributions already summed: 2 for `z.sum() + z.sum()`, 5 for
`(2 * z).sum() + (3 * z).sum()`.
"""),
        code(script["section_17_3"].strip("\n") + '\n\n\nrun_section("17.3", section_17_3)'),
        markdown("Each contribution and their sum, arriving at one call of `TritonGELUBackward`:"),
        code("show(recordings[3:])"),
        markdown(SUMMARY),
        markdown("""
## Does this machine reproduce the chapter?

The output above against the chapter's, as `check_outputs.sh` checks the scripts.
"""),
        code(CHECK_CELL_TEMPLATE.format(expected=expected_sections())),
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
    return write_or_check(build(), args.output, args.check, "tools/build_notebook.py",
                          "then run it on a GPU (tools/run_notebook.py)")


def write_or_check(notebook, output, check, generator, after_regenerating=""):
    """Writes notebook to output; or, with check, exit status 1 if output's cells differ from it."""
    if check:
        try:
            committed = sources(json.loads(output.read_text()))
        except (OSError, ValueError, KeyError, TypeError) as error:  # missing, not JSON, or not a notebook
            print(f"{generator}: --check {output}: no notebook to compare ({type(error).__name__}: "
                  f"{str(error).splitlines()[0] if str(error) else 'unreadable'})", file=sys.stderr)
            return 2
        if committed != sources(notebook):
            print(f"{output} differs from what {generator} makes: regenerate it (python {generator})"
                  + (f", {after_regenerating}" if after_regenerating else ""), file=sys.stderr)
            return 1
        print(f"{output}: every cell is what {generator} makes")
        return 0
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
