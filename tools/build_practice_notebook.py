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
  practice/exercise_kit.py        the exercises' shared kernels and helpers, and their grading
  practice/exercises.py           the exercises (not the solutions)

with the imports between those files left out, since the notebook defines everything
itself. Its last cell is the learner's score, in exercises.py's words: one line an
exercise (solved, or the trap the checker still finds as a hint), then "K of N solved".

    python tools/build_practice_notebook.py            # (re)writes notebooks/practice.ipynb
    python tools/build_practice_notebook.py --check    # exit 1 if the committed cells differ

``build(solved=True)`` makes the same notebook with practice/solutions.py's classes in the
exercises' cells: tests/test_notebook.py runs it to prove that the notebook's own grading
passes every solution. It is never written to notebooks/.
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
LOCAL_MODULES = {"hardened_ops", "backward_checker", "exercise_kit", "exercises", "solutions"}


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


CHECKER_TITLE = "# @title The backward checker (backward-check/backward_check/): run it, open it if you are curious\n"

# The checker is a package whose modules import each other (from . import layouts). The notebook holds
# each module's source verbatim (less its imports of the repository's files, whose names it defines
# itself) and makes the package from them in memory, so the folder around the notebook stays untouched.
PACKAGE_LOADER = """

def make_package(name, sources, given):
    \"\"\"A package built from {module: source} in memory (the last source is its __init__), its
    modules in the order given (a dotted one, checks.truth, in a subpackage made for it); `given` are
    the names its sources import from files left out here.\"\"\"
    def package_module(dotted):
        if dotted not in sys.modules:
            made = types.ModuleType(dotted)
            made.__path__, made.__package__ = [], dotted
            sys.modules[dotted] = made
            if "." in dotted:
                parent, _, child = dotted.rpartition(".")
                setattr(package_module(parent), child, made)
        return sys.modules[dotted]

    package = package_module(name)
    for module, source in sources.items():
        if module == "__init__":
            target = package
        else:
            parent = package_module(f"{name}.{module}".rpartition(".")[0])
            target = types.ModuleType(f"{name}.{module}")
            target.__package__ = parent.__name__
            sys.modules[target.__name__] = target
            setattr(parent, module.rpartition(".")[2], target)
        target.__dict__.update(given)
        exec(compile(source, f"{name}/{module.replace('.', '/')}.py", "exec"), target.__dict__)
    return package


make_package("backward_check", BACKWARD_CHECK, {GIVEN})
from backward_check import check_backward  # noqa: E402
"""


# The pytest plugin's own modules (its subpackage), assert_backward for a test suite, and the command line: a library's
# test suite or a terminal runs them, a notebook never does.
PLUGIN_MODULES = ("cli", "testing")
SUBPACKAGES = ("checks",)  # the check families; plugin/ and tests/ stay out


def package_order(package):
    """The package's modules, each after those it imports (from . import x, from .x import y, from ..x import y),
    __init__ last; a subpackage's modules dotted (checks.truth); the plugin's own modules left out."""
    paths = [p for p in sorted(package.glob("*.py")) if p.stem not in PLUGIN_MODULES]
    paths += [p for sub in SUBPACKAGES for p in sorted((package / sub).glob("*.py")) if p.stem != "__init__"]
    known = {(p.stem if p.parent == package else f"{p.parent.name}.{p.stem}") for p in paths}

    def resolved(where, node):
        """The modules of this package that an ImportFrom in module `where` names."""
        base = where.split(".")[:-1][:len(where.split(".")) - node.level]  # the importing module's package, up
        if node.level == 0:
            return set()
        prefix = ".".join(base + ([node.module] if node.module else []))
        names = {prefix} if node.module else set()
        names |= {f"{prefix}.{alias.name}" if prefix else alias.name for alias in node.names}
        return names & known

    needs = {}
    for path in paths:
        where = path.stem if path.parent == package else f"{path.parent.name}.{path.stem}"
        tree = ast.parse(path.read_text())
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                imported |= resolved(where, node)
        needs[where] = imported - {where}
    order = []
    while len(order) < len(needs):
        ready = sorted(m for m, deps in needs.items() if m not in order and m != "__init__" and deps <= set(order))
        if not ready:
            break
        order += ready
    return order + ["__init__"]


def checker_code():
    package = REPO / "backward-check" / "backward_check"
    sources, given = [], []
    for module in package_order(package):
        original = (package / f"{module.replace('.', '/')}.py").read_text()
        given += [alias.name for node in ast.parse(original).body if isinstance(node, ast.ImportFrom)
                  and node.module in LOCAL_MODULES for alias in node.names if alias.name not in given]
        text = without_local_imports(original)
        if "\'\'\'" in text or text.endswith("\\\n"):
            raise SystemExit(f"backward-check/backward_check/{module.replace('.', '/')}.py cannot be held in r\'\'\'...\'\'\': it holds \'\'\'")
        sources.append(f'    "{module}": r\'\'\'\n{text}\'\'\',\n')
    # What the exercises' grading imports from the package, as exercise_kit.py imports it.
    kit = ast.parse((PRACTICE / "exercise_kit.py").read_text())
    grading = "".join(ast.unparse(node) + "  # noqa: E402\n" for node in kit.body
                      if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("backward_check."))
    return (CHECKER_TITLE + "import sys\nimport types\n\nBACKWARD_CHECK = {  # module: its source\n"
            + "".join(sources) + "}\n" + PACKAGE_LOADER.replace(
                "{GIVEN}", "{" + ", ".join(f'"{name}": {name}' for name in given) + "}") + grading)


QUESTION_PROMPT = "**Your prediction** (double-click this cell to write it, then run the next cell):"

# The exercises' cells, in order: each a tuple of exercises.py's names (solutions.py has the same ones), or a
# markdown line and the exercise_kit.py names shown in one cell before them.
EXERCISE_CELLS = [("GELUNoChainRule",), ("GELUFirstElement",), ("GELUSharedDerivative",), ("GELUInPlace",),
                  ("GELURawLaunch",), ("ScaleColumns",), ("GELUAsPrinted",),
                  ("The ops whose backward you write: their forward kernels first.",
                   "mul_forward_kernel", "silu_forward_kernel", "launch_elementwise"),
                  ("TritonMul",), ("TritonSiLU",),
                  ("Bugs that real libraries shipped, re-created small: their forward kernels first (a row's "
                   "log-sum-exp, a causal convolution, a cross-entropy that also computes its gradient).",
                   "row_block", "_maximum", "_add", "maximum", "add", "row_logsumexp_kernel", "causal_conv_forward_kernel",
                   "cross_entropy_kernel", "CAUSAL_TAP"),
                  ("row_logsumexp_backward_kernel", "RowLogSumExp"), ("causal_conv_backward_kernel", "CausalConv"),
                  ("CrossEntropyInPlace",)]
GRADING_BLOCKS = ("random_input", "one_input", "two_inputs", "rows_and_weights", "logits_input", "sequence_input",
                  "logits_and_targets", "gelu_reference", "causal_conv_reference", "Exercise", "EXERCISES", "grade",
                  "is_solved", "hint", "score")


def joined(blocks, names):
    return "\n\n\n".join(blocks[name].strip("\n") for name in names) + "\n"


def solutions_only(solutions, exercises):
    """solutions.py's own helpers and kernels (mul_backward_kernel, say): its defs that exercises.py lacks."""
    return [name for name, text in solutions.items() if name not in exercises and name != "main"
            and text.lstrip().startswith(("@triton.jit", "def "))]


def cells(solved=False):
    """The notebook's cells; solved: with solutions.py's classes (and kernels) in place of the exercises'."""
    questions = top_level_blocks(PRACTICE / "self_check.py")
    kit = top_level_blocks(PRACTICE / "exercise_kit.py")
    exercises = top_level_blocks(PRACTICE / "exercises.py")
    solutions = top_level_blocks(PRACTICE / "solutions.py")
    question_texts = [pair.elts[0].value for pair in ast.parse(questions["QUESTIONS"]).body[0].value.elts]
    count = len(ast.parse(kit["EXERCISES"]).body[0].value.elts)
    notebook = [
        markdown(f"""
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
3. **Exercises.** {count} of them: backwards with one trap each to fix, and backwards to
   write. The last cell grades them and keeps your score: "0 of {count} solved" before you
   start, each exercise not solved yet with the trap the checker still finds as a hint.
   The solutions are kept apart, in the companion repository's `practice/solutions.py`.
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
        code('print(f"{sum(answers)} of {len(answers)} answers shown as the chapter states them")\n'),
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
it again, then run the grading cell at the end. Exercises 8 and 9: write the backward.
Exercises 10 to 12 re-create, in a small Triton kernel, a trap that a real library shipped;
each docstring links the real bug (read it after you have tried).
"""),
        code("import math\n\n\n" + kit["gelu_local_derivative"].strip("\n") + "\n"),
    ]
    if solved:
        notebook.append(code(joined(solutions, solutions_only(solutions, exercises))))
    for entry in EXERCISE_CELLS:
        if " " in entry[0]:  # a line of text, then shared kernels
            notebook += [markdown(entry[0]), code(joined(kit, entry[1:]))]
        else:
            notebook.append(code(joined(solutions if solved else exercises, entry)))
    notebook += [
        markdown("## Your score\n\nEach exercise graded by the checker. Run this cell after each fix (the "
                 "notebook's own definitions stand in for the module the grader looks exercises up in)."),
        code("import dataclasses\nimport types\n\n\n" + joined(kit, GRADING_BLOCKS) + "\n\n"
             "solved = score(types.SimpleNamespace(**globals()))\n"),
    ]
    return notebook


def build(solved=False):
    notebook_cells = cells(solved)
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
