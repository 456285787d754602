"""
Build notebooks/practice.ipynb from practice/: never edit the notebook by hand
==============================================================================

The practice notebook works alone, like the chapter's: uploaded to Colab, Kaggle or any
Jupyter, it asks the chapter's five self-check questions (write a prediction, then run
the evidence), shows the backward checker on the chapter's op, and sets the exercises,
each graded by the checker. Its code is taken verbatim from:

  hardened_ops.py                 the kernels and launch helpers (a collapsed cell)
  practice/backward_checker.py    the checker (a collapsed cell)
  practice/self_check.py          the five questions and their evidence
  practice/exercises.py           the exercises and their grading (not the solutions)

with the imports between those files left out, since the notebook defines everything
itself. Its last cell checks that the answers and the checker behave as the chapter and
the exercises say: each exercise either passes (solved) or shows the trap it plants.

    python tools/build_practice_notebook.py            # (re)writes notebooks/practice.ipynb
    python tools/build_practice_notebook.py --check    # exit 1 if the committed cells differ
"""
import argparse
import ast
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_notebook import ENVIRONMENT_CELL, code, collapsed, markdown, top_level_blocks, write_or_check  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK = REPO / "notebooks" / "practice.ipynb"
PRACTICE = REPO / "practice"
LOCAL_MODULES = {"hardened_ops", "backward_checker", "exercises", "solutions"}


def without_local_imports(text, stop_before=None):
    """A file's code without its docstring, the sys.path lines and the imports of the repository's own
    modules (the notebook defines them itself), up to the line that starts with stop_before."""
    lines = text.splitlines(keepends=True)
    if stop_before:
        lines = lines[:next(i for i, line in enumerate(lines) if line.startswith(stop_before))]
    tree = ast.parse("".join(lines))
    drop = set()
    for node in tree.body:
        local_import = isinstance(node, ast.ImportFrom) and node.module in LOCAL_MODULES
        path_line = isinstance(node, ast.Expr) and ast.unparse(node).startswith("sys.path.insert")
        docstring = node is tree.body[0] and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        if local_import or path_line or docstring:
            drop.update(range(node.lineno - 1, node.end_lineno))
    kept = "".join(line for i, line in enumerate(lines) if i not in drop)
    while "\n\n\n\n" in kept:
        kept = kept.replace("\n\n\n\n", "\n\n\n")
    return kept.strip("\n") + "\n"


def hardened_code():
    text = (REPO / "hardened_ops.py").read_text()
    body = text[text.index("import contextlib"):]
    return ("# @title The chapter's op, hardened (hardened_ops.py): kernels, checks, launch helpers\n"
            + without_local_imports(body, stop_before='if __name__ == "__main__":'))


def checker_code():
    text = (PRACTICE / "backward_checker.py").read_text()
    return ("# @title The backward checker (practice/backward_checker.py): run it, open it if you are curious\n"
            + without_local_imports(text, stop_before="# The command line").rstrip().removesuffix(
                "# ---------------------------------------------------------------------------").rstrip() + "\n")


QUESTION_PROMPT = "**Your prediction** (double-click this cell to write it, then run the next cell):"

CHECK_CELL = """\
# Does this notebook behave as the chapter and the exercises say? The five answers as the chapter
# states them; the chapter's TritonGELU clean; each exercise solved, or showing the trap it plants.
this_notebook = types.SimpleNamespace(**globals())
results = {f"self-check question {n}": bool(answer) for n, answer in enumerate(answers, start=1)}
results["the checker passes hardened TritonGELU"] = check_backward(
    TritonGELU, torch.randn(3, 5).to(DEVICE), reference=gelu_reference).clean
for exercise in EXERCISES:
    report = grade(exercise, this_notebook)
    state = "solved" if report.clean else "shows its trap" if report.traps == [exercise.planted] else "unexpected"
    results[f"exercise {exercise.number} ({exercise.name}) {state}"] = state != "unexpected"
for what, ok in results.items():
    print(("PASS  " if ok else "FAIL  ") + what)
print(f"{sum(results.values())} passed, {len(results) - sum(results.values())} failed")
"""


def cells():
    questions = top_level_blocks(PRACTICE / "self_check.py")
    exercises = top_level_blocks(PRACTICE / "exercises.py")
    question_texts = [pair.elts[0].value for pair in ast.parse(questions["QUESTIONS"]).body[0].value.elts]
    notebook = [
        markdown("""
# Chapter 17, practice: the self-check questions, a backward checker, exercises

Upload this file to Google Colab (a T4 GPU: *Runtime > Change runtime type*), to Kaggle,
or open it in any Jupyter, and run the cells in order; without a GPU the kernels run in
Triton's interpreter. Three parts:

1. **The chapter's five self-check questions.** Write your prediction in the cell under
   each question, then run the code that prints the evidence.
2. **A backward checker.** `check_backward(op, x, reference=...)` calls a backward the
   ways autograd really calls it (a random, a uniform, a stride-0 and a transposed
   `grad_output`, fan-in, two uses in one graph, a sibling branch sharing its
   `grad_output`) and names the chapter's trap it finds.
3. **Exercises.** Seven backwards with one trap each to fix, and two to write (one of
   them with two inputs). The checker grades them; the solutions are kept apart, in the
   companion repository's `practice/solutions.py`.
"""),
        code(ENVIRONMENT_CELL),
        markdown("The chapter's kernels and `torch.autograd.Function`s, hardened, and the checker. "
                 "Run both cells; open them if you are curious."),
        collapsed(hardened_code()),
        collapsed(checker_code()),
        markdown("## Part 1: the self-check questions\n\nTwo helpers: seeded inputs, and a hook that "
                 "records what a node's backward received."),
        code(questions["seeded"] + "\n\n" + questions["received_by"].strip("\n") + "\n\n\nanswers = []\n"),
    ]
    for n, text in enumerate(question_texts, start=1):
        question = " ".join(line.strip() for line in text.splitlines())
        notebook += [markdown(f"### {question}"), markdown(QUESTION_PROMPT),
                     code(questions[f"question_{n}"].strip("\n") + f"\n\n\nanswers.append(question_{n}())\n")]
    notebook += [
        markdown("""
## Part 2: the backward checker, on the chapter's op

A clean report for `TritonGELU`, and the traps of Chapter 16's buggy backward. Point it at
your own `torch.autograd.Function` the same way: `check_backward(MyOp, x, reference=...)`,
or without a reference (finite differences in float64). `second_order=True` also checks
`create_graph=True`.
"""),
        code("print(check_backward(TritonGELU, torch.randn(3, 5).to(DEVICE), reference=torch.nn.functional.gelu))\n"
             "print(check_backward(TritonGELUBuggy, torch.randn(3, 5).to(DEVICE), reference=torch.nn.functional.gelu))\n"),
        markdown("""
## Part 3: exercises

Exercises 1 to 7: each backward has one of the chapter's traps. Find it, fix the cell, run
it again, then run the grading cell. Exercises 8 and 9: write the backward.
"""),
        code("import math\n\n\n" + exercises["gelu_local_derivative"].strip("\n") + "\n"),
    ]
    for name in ("GELUNoChainRule", "GELUFirstElement", "GELUSharedDerivative", "GELUInPlace", "GELURawLaunch",
                 "SquareInFloat64", "GELUAsPrinted"):
        notebook.append(code(exercises[name]))
    notebook += [
        markdown("The two ops whose backward you write: their forward kernels first."),
        code(exercises["mul_forward_kernel"].strip("\n") + "\n\n\n" + exercises["silu_forward_kernel"].strip("\n")
             + "\n\n\n" + exercises["launch_elementwise"]),
        code(exercises["TritonMul"]),
        code(exercises["TritonSiLU"]),
        markdown("Grading: each exercise's report. Run it after each fix (the notebook's own definitions "
                 "stand in for the module the grader looks exercises up in)."),
        code("import dataclasses\nimport types\n\n\n" + "\n\n\n".join(exercises[name].strip("\n") for name in (
            "Exercise", "gelu_reference", "EXERCISES", "exercise_inputs", "grade")) + "\n\n\n"
             "this_notebook = types.SimpleNamespace(**globals())\n"
             "for exercise in EXERCISES:\n"
             "    report = grade(exercise, this_notebook)\n"
             "    print(f\"PASS  {report.name}\" if report.clean else report)\n"),
        markdown("## Does this notebook behave as it should?"),
        code(CHECK_CELL),
    ]
    return notebook


def build():
    notebook_cells = cells()
    for i, cell in enumerate(notebook_cells):
        cell["id"] = f"cell-{i:02d}"
    return {"cells": notebook_cells,
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                         "language_info": {"name": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed notebook; write nothing")
    parser.add_argument("--output", type=Path, default=NOTEBOOK, help="default: notebooks/practice.ipynb")
    args = parser.parse_args(argv)
    return write_or_check(build(), args.output, args.check, "tools/build_practice_notebook.py")

if __name__ == "__main__":
    sys.exit(main())
