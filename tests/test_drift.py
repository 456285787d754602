"""Drift guard: where the chapter's kernels live, and that their copies stay in step.

- The four scripts carry their own copies of the book's kernels on purpose (the book
  prints them so): every @triton.jit function defined in more than one script, or in
  the generated notebook, has the same parsed AST in each.
- The scripts' backend choice is the same in every script.
- hardened_ops.py is the one hardened copy: outside the scripts, listings/, the
  notebooks, hardened_ops.py and the exercises' own new kernels (practice/), no file
  defines a kernel (the extras, benchmarks and tools import them). The practice
  notebook's copies of hardened_ops.py's and the exercises' kernels are identical to them.
- Each autograd Function launches its own kernels, in the scripts and in the module.
"""
import ast
import json
from itertools import combinations

import pytest
from chapter_scripts import REPO, SCRIPT_NAMES

NOTEBOOK = "notebooks/chapter17"
PRACTICE_NOTEBOOK = "notebooks/practice"
MODULE = "hardened_ops"
EXERCISE_KIT = "practice/exercise_kit"
EXERCISES = "practice/exercises"
SOLUTIONS = "practice/solutions"

# What each file must define, for its story and for the tests. The tests pick the scripts to
# run against by the names they define (chapter_scripts.scripts_defining): a name renamed in
# one script would silently drop that script from those tests, so every such name is here.
COMMON = {"DEVICE", "gelu_forward_kernel", "gelu_backward_kernel", "TritonGELU"}
REQUIRED_NAMES = {
    "01_chained_expression": COMMON | {
        "gelu_backward_kernel_buggy_no_chain_rule", "triton_gelu_forward", "_launch_bwd", "TritonGELUBuggy",
        "section_17_1"},
    "02_graph_structure": COMMON | {
        "square_forward_kernel", "square_backward_kernel", "_launch", "_launch_bwd", "TritonSquare", "order",
        "section_17_2"},
    "03_fan_in": COMMON | {"triton_gelu_forward", "triton_gelu_backward", "captured", "section_17_3"},
    "04_standalone_complete": COMMON | {
        "gelu_backward_kernel_buggy_no_chain_rule", "square_forward_kernel", "square_backward_kernel",
        "_launch", "_launch_bwd", "TritonGELUBuggy", "TritonSquare", "call_order", "captured_grads",
        "section_17_1", "section_17_2", "section_17_3"},
    MODULE: COMMON | {
        "compute_dtype", "gelu_backward_kernel_buggy_no_chain_rule", "square_forward_kernel", "square_backward_kernel",
        "kernel_operands", "device_of", "no_double_backward", "launch_forward", "launch_backward",
        "TritonGELUBuggy", "TritonSquare", "TritonGELUModule"},
    NOTEBOOK: COMMON | {
        "gelu_backward_kernel_buggy_no_chain_rule", "square_forward_kernel", "square_backward_kernel",
        "_launch", "_launch_bwd", "TritonGELUBuggy", "TritonSquare", "call_order", "captured_grads",
        "section_17_1", "section_17_2", "section_17_3", "record_backward", "render_ascii"},
    EXERCISE_KIT: {"mul_forward_kernel", "silu_forward_kernel", "row_logsumexp_kernel", "causal_conv_forward_kernel",
                   "cross_entropy_kernel", "EXERCISES", "grade", "score"},
    EXERCISES: {"TritonMul", "TritonSiLU", "row_logsumexp_backward_kernel", "causal_conv_backward_kernel",
                "RowLogSumExp", "CausalConv", "CrossEntropyInPlace"},
    SOLUTIONS: {"mul_backward_kernel", "silu_backward_kernel", "TritonMul", "TritonSiLU",
                "row_logsumexp_backward_kernel", "causal_conv_backward_kernel", "RowLogSumExp", "CausalConv",
                "CrossEntropyInPlace"},
    PRACTICE_NOTEBOOK: COMMON | {
        "launch_forward", "launch_backward", "BACKWARD_CHECK", "make_package", "mul_forward_kernel",
        "silu_forward_kernel", "TritonMul", "TritonSiLU", "RowLogSumExp", "CausalConv", "CrossEntropyInPlace", "EXERCISES", "grade",
        "score", "question_1", "question_5"},
}


def parse(name):
    return ast.parse((REPO / f"{name}.py").read_text(), filename=f"{name}.py")


def parse_notebook(name):
    cells = json.loads((REPO / f"{name}.ipynb").read_text())["cells"]
    sources = ("".join(c["source"]) for c in cells if c["cell_type"] == "code")  # a string, or a list of lines
    return ast.parse("\n\n".join(s for s in sources if not s.lstrip().startswith(("!", "%"))),
                     filename=f"{name}.ipynb")


TREES = ({name: parse(name) for name in SCRIPT_NAMES + (MODULE, EXERCISE_KIT, EXERCISES, SOLUTIONS)}
         | {name: parse_notebook(name) for name in (NOTEBOOK, PRACTICE_NOTEBOOK)})
# Files whose kernels of one name must be identical: the book's kernels as printed, and the hardened ones.
# An exercise's buggy backward kernel and its solution's share a name and differ on purpose; the
# solutions' kernels have no copy anywhere (the exact sets below say so), so solutions.py is in no family.
FAMILIES = {"book": SCRIPT_NAMES + (NOTEBOOK,),
            "hardened": (MODULE, EXERCISE_KIT, EXERCISES, PRACTICE_NOTEBOOK)}


def definitions(tree):
    return {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}


def is_kernel(node):
    return isinstance(node, ast.FunctionDef) and any(ast.unparse(d) == "triton.jit" for d in node.decorator_list)


def kernels(tree):
    return {name: node for name, node in definitions(tree).items() if is_kernel(node)}


def helpers(tree):
    return {name: node for name, node in definitions(tree).items()
            if isinstance(node, ast.FunctionDef) and not is_kernel(node) and not name.startswith("section_")}


def functions(tree):
    return {name: node for name, node in definitions(tree).items()
            if isinstance(node, ast.ClassDef) and any(ast.unparse(b) == "torch.autograd.Function" for b in node.bases)}


def shared_kernels():
    for family, members in FAMILIES.items():
        for a, b in combinations(members, 2):
            kernels_a, kernels_b = kernels(TREES[a]), kernels(TREES[b])
            for name in sorted(kernels_a.keys() & kernels_b.keys()):
                yield pytest.param(name, a, kernels_a[name], b, kernels_b[name], id=f"{name}-{a}-vs-{b}")


@pytest.mark.parametrize("name, a, kernel_a, b, kernel_b", list(shared_kernels()))
def test_kernel_copies_are_identical(name, a, kernel_a, b, kernel_b):
    assert ast.dump(kernel_a) == ast.dump(kernel_b), (
        f"kernel {name} differs between {a} and {b}; the copies must stay identical:\n"
        f"--- {a}\n{ast.unparse(kernel_a)}\n--- {b}\n{ast.unparse(kernel_b)}")


def backend_choice(tree):
    """The top-level statements that choose the backend: the INTERPRET reading and the `if`."""
    return [ast.dump(node) for node in tree.body
            if (isinstance(node, ast.If) and "DEVICE" in ast.unparse(node))
            or (isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "INTERPRET")]


def test_backend_choice_is_identical_in_every_copy_of_the_book():
    first = backend_choice(TREES[SCRIPT_NAMES[0]])
    assert len(first) == 2, "expected INTERPRET and the backend `if` at the top level of each script"
    for name in FAMILIES["book"]:
        assert backend_choice(TREES[name]) == first, f"{name} chooses its backend differently from {SCRIPT_NAMES[0]}"


def test_no_other_file_defines_a_kernel():
    """The extras, benchmarks, tools and tests import the kernels from hardened_ops.py (or load a script)."""
    allowed = {f"{name}.py" for name in SCRIPT_NAMES + (MODULE, EXERCISE_KIT, EXERCISES, SOLUTIONS)}
    allowed.add("tests/checker_zoo_planted.py")  # the checker's planted bugs: kernels wrong on purpose, each one of a kind
    allowed.add("tests/checker_zoo_blind.py")  # written without reading the zoos: its own leaky ReLU, right and wrong
    allowed.add("backward-check/examples/test_backward.py")  # a library's own op, for a library to copy: it imports nothing of the book
    copies = []
    for path in sorted(REPO.rglob("*.py")):
        relative = path.relative_to(REPO).as_posix()
        if relative in allowed or relative.startswith(("listings/", ".venv/", ".")) or "/." in relative:
            continue
        tree = ast.parse(path.read_text(), filename=relative)
        found = [node.name for node in ast.walk(tree) if is_kernel(node)]
        if found:
            copies.append(f"{relative}: {', '.join(found)}")
    assert not copies, "kernels defined outside the scripts and hardened_ops.py:\n" + "\n".join(copies)


def launched_kernels(tree, method):
    """The kernels a method launches, directly or through the file's helper functions."""
    kernel_names, helper_nodes = kernels(tree).keys(), helpers(tree)
    found, seen, pending = set(), set(), [method]
    while pending:
        node = pending.pop()
        for name in {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} - seen:
            seen.add(name)
            if name in kernel_names:
                found.add(name)
            elif name in helper_nodes:
                pending.append(helper_nodes[name])
    return found


def test_every_function_launches_its_own_kernels():
    """The chapter's Functions, wherever they are defined (the exercises' are wrong on purpose)."""
    expected = {
        "TritonGELU": ({"gelu_forward_kernel"}, {"gelu_backward_kernel"}),
        "TritonGELUBuggy": ({"gelu_forward_kernel"}, {"gelu_backward_kernel_buggy_no_chain_rule"}),
        "TritonSquare": ({"square_forward_kernel"}, {"square_backward_kernel"}),
    }
    for name, tree in TREES.items():
        for function, cls in functions(tree).items():
            if function not in expected:
                continue
            methods = {m.name: m for m in cls.body if isinstance(m, ast.FunctionDef)}
            launched = (launched_kernels(tree, methods["forward"]), launched_kernels(tree, methods["backward"]))
            assert launched == expected[function], f"{name}: {function} launches {launched}"


def test_the_hardened_backwards_refuse_double_backward():
    for function, cls in functions(TREES[MODULE]).items():
        backward, = [m for m in cls.body if isinstance(m, ast.FunctionDef) and m.name == "backward"]
        assert "no_double_backward" in [ast.unparse(d) for d in backward.decorator_list], function


@pytest.mark.parametrize("name", list(TREES))
def test_each_file_defines_what_its_section_needs(name):
    tree = TREES[name]
    defined = set(definitions(tree)) | {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
                                        for t in node.targets if isinstance(t, ast.Name)}
    missing = REQUIRED_NAMES[name] - defined
    assert not missing, f"{name} lacks {sorted(missing)}"


def test_the_drift_guard_sees_every_kernel():
    """The comparisons above are only as good as their inputs: every file's kernels, by name."""
    gelu = {"gelu_forward_kernel", "gelu_backward_kernel"}
    square = {"square_forward_kernel", "square_backward_kernel"}
    buggy = {"gelu_backward_kernel_buggy_no_chain_rule"}
    kit = {"mul_forward_kernel", "silu_forward_kernel", "_maximum", "_add", "row_logsumexp_kernel",
           "causal_conv_forward_kernel", "cross_entropy_kernel"}
    fix = {"row_logsumexp_backward_kernel", "causal_conv_backward_kernel"}  # the exercises' kernels to fix
    expected = {
        "01_chained_expression": gelu | buggy, "02_graph_structure": gelu | square, "03_fan_in": gelu,
        "04_standalone_complete": gelu | square | buggy, MODULE: gelu | square | buggy | {"compute_dtype"},
        NOTEBOOK: gelu | square | buggy, EXERCISE_KIT: kit, EXERCISES: fix,
        SOLUTIONS: fix | {"mul_backward_kernel", "silu_backward_kernel"},
        PRACTICE_NOTEBOOK: gelu | square | buggy | {"compute_dtype"} | kit | fix,
    }
    assert {name: set(kernels(tree)) for name, tree in TREES.items()} == expected
