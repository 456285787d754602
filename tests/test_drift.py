"""Drift guard: the four scripts carry their own copies of the kernels on purpose,
and these tests keep the copies in step.

- Every @triton.jit function defined in more than one script has the same
  parsed AST in each (so formatting and comments are not differences).
- Every other shared helper, and the module-level backend choice, has the same
  AST once parameters are renamed: the chapter itself names one parameter
  `kernel` in 01 and `bwd_kernel` in 02 and 04.
- Each autograd Function launches the same kernels in every script. Their
  bodies legitimately differ as printed: each section records something else
  (`order`, `captured`, ...) and 01/03 launch through other helpers than 02/04.
"""
import ast
import json
from itertools import combinations

import pytest
from chapter_scripts import EXTRAS_NAMES, REPO, SCRIPT_NAMES

# The notebook is one more copy: its code cells, read as one module.
NOTEBOOK = "notebooks/chapter17"

# What each file must define, for its story and for the tests. The tests pick the files to
# run against by the names they define (chapter_scripts.scripts_defining): a helper renamed
# in one file would silently drop that file from those tests, so every such name is here.
COMMON = {"DEVICE", "compute_dtype", "kernel_operands", "device_of", "no_double_backward",
          "gelu_forward_kernel", "gelu_backward_kernel", "TritonGELU"}
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
    # Beyond the chapter: each extra carries copies of the kernels and launch helpers it uses.
    "extras/train_mlp": COMMON | {
        "gelu_backward_kernel_buggy_no_chain_rule", "_launch", "_launch_bwd", "TritonGELUBuggy", "train"},
    "extras/triton_op": COMMON | {
        "square_forward_kernel", "square_backward_kernel", "_launch", "_launch_bwd", "gelu", "square",
        "recording_backward_calls"},
    "extras/autograd_diagram": COMMON | {
        "gelu_backward_kernel_buggy_no_chain_rule", "square_forward_kernel", "square_backward_kernel",
        "_launch", "_launch_bwd", "TritonGELUBuggy", "TritonSquare", "record_backward", "render_ascii",
        "render_mermaid", "render_dot"},
    NOTEBOOK: COMMON | {
        "gelu_backward_kernel_buggy_no_chain_rule", "square_forward_kernel", "square_backward_kernel",
        "_launch", "_launch_bwd", "TritonGELUBuggy", "TritonSquare", "call_order", "captured_grads",
        "section_17_1", "section_17_2", "section_17_3", "record_backward", "render_ascii", "chapter_recordings"},
}


def parse(script):
    return ast.parse((REPO / f"{script}.py").read_text(), filename=f"{script}.py")


def parse_notebook():
    cells = json.loads((REPO / f"{NOTEBOOK}.ipynb").read_text())["cells"]
    sources = ("".join(c["source"]) for c in cells if c["cell_type"] == "code")  # a string, or a list of lines
    return ast.parse("\n\n".join(sources), filename=f"{NOTEBOOK}.ipynb")


TREES = {script: parse(script) for script in SCRIPT_NAMES + EXTRAS_NAMES} | {NOTEBOOK: parse_notebook()}


def definitions(tree):
    return {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}


def is_kernel(node):
    return isinstance(node, ast.FunctionDef) and any(ast.unparse(d) == "triton.jit" for d in node.decorator_list)


def kernels(tree):
    return {name: node for name, node in definitions(tree).items() if is_kernel(node)}


def helpers(tree):
    return {name: node for name, node in definitions(tree).items()
            if isinstance(node, ast.FunctionDef) and not is_kernel(node) and not name.startswith("section_")
            and name != "main"}  # each file's own entry point


def functions(tree):
    return {name: node for name, node in definitions(tree).items()
            if isinstance(node, ast.ClassDef) and any(ast.unparse(b) == "torch.autograd.Function" for b in node.bases)}


class _RenameParameters(ast.NodeTransformer):
    def __init__(self, parameters):
        self.names = {name: f"_arg{i}" for i, name in enumerate(parameters)}

    def visit_arg(self, node):
        node.arg = self.names.get(node.arg, node.arg)
        return node

    def visit_Name(self, node):
        node.id = self.names.get(node.id, node.id)
        return node


def dump_with_parameters_renamed(function):
    copy = ast.parse(ast.unparse(function)).body[0]
    return ast.dump(_RenameParameters([a.arg for a in copy.args.args]).visit(copy))


def short(name):
    return name.removeprefix("extras/") if name.startswith("extras/") else name[:2]


def shared(definitions_of):
    """(name, script_a, node_a, script_b, node_b) for each definition two scripts both have."""
    for (a, tree_a), (b, tree_b) in combinations(TREES.items(), 2):
        defs_a, defs_b = definitions_of(tree_a), definitions_of(tree_b)
        for name in sorted(defs_a.keys() & defs_b.keys()):
            yield pytest.param(name, a, defs_a[name], b, defs_b[name], id=f"{name}-{short(a)}-vs-{short(b)}")


@pytest.mark.parametrize("name, a, kernel_a, b, kernel_b", list(shared(kernels)))
def test_kernel_copies_are_identical(name, a, kernel_a, b, kernel_b):
    assert ast.dump(kernel_a) == ast.dump(kernel_b), (
        f"kernel {name} differs between {a}.py and {b}.py; the copies must stay identical:\n"
        f"--- {a}.py\n{ast.unparse(kernel_a)}\n--- {b}.py\n{ast.unparse(kernel_b)}")


@pytest.mark.parametrize("name, a, helper_a, b, helper_b", list(shared(helpers)))
def test_helper_copies_are_identical(name, a, helper_a, b, helper_b):
    assert dump_with_parameters_renamed(helper_a) == dump_with_parameters_renamed(helper_b), (
        f"helper {name} differs between {a}.py and {b}.py:\n"
        f"--- {a}.py\n{ast.unparse(helper_a)}\n--- {b}.py\n{ast.unparse(helper_b)}")


def module_setup(tree):
    """The top-level statements that set the scripts up: the backend choice and KERNEL_DTYPES."""
    return [ast.dump(node) for node in tree.body
            if (isinstance(node, ast.If) and "DEVICE" in ast.unparse(node))
            or (isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "KERNEL_DTYPES")]


def test_backend_choice_is_identical_in_every_script():
    setups = {script: module_setup(tree) for script, tree in TREES.items()}
    first = setups[SCRIPT_NAMES[0]]
    assert len(first) == 2, "expected the backend `if` and KERNEL_DTYPES at the top level of each script"
    for script, setup in setups.items():
        assert setup == first, f"{script}.py sets up its backend or KERNEL_DTYPES differently from {SCRIPT_NAMES[0]}.py"


def launched_kernels(tree, method):
    """The kernels a method launches, directly or through the script's helper functions."""
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


def function_profile(tree, cls):
    """For each method: its decorators and the kernels it launches."""
    return {m.name: ([ast.unparse(d) for d in m.decorator_list], sorted(launched_kernels(tree, m)))
            for m in cls.body if isinstance(m, ast.FunctionDef)}


@pytest.mark.parametrize("name, a, cls_a, b, cls_b", list(shared(functions)))
def test_functions_launch_the_same_kernels_everywhere(name, a, cls_a, b, cls_b):
    profile_a, profile_b = function_profile(TREES[a], cls_a), function_profile(TREES[b], cls_b)
    assert profile_a == profile_b, f"{name} differs between {a}.py {profile_a} and {b}.py {profile_b}"


def test_every_function_launches_its_own_kernels():
    expected = {
        "TritonGELU": (["gelu_forward_kernel"], ["gelu_backward_kernel"]),
        "TritonGELUBuggy": (["gelu_forward_kernel"], ["gelu_backward_kernel_buggy_no_chain_rule"]),
        "TritonSquare": (["square_forward_kernel"], ["square_backward_kernel"]),
    }
    for script, tree in TREES.items():
        for name, cls in functions(tree).items():
            profile = function_profile(tree, cls)
            assert (profile["forward"][1], profile["backward"][1]) == expected[name], f"{script}.py: {name}"
            assert "no_double_backward" in profile["backward"][0], f"{script}.py: {name}.backward"


def test_every_file_the_guard_reads_has_its_required_names():
    assert set(REQUIRED_NAMES) == set(TREES)


@pytest.mark.parametrize("script", list(TREES))
def test_each_script_defines_what_its_section_needs(script):
    tree = TREES[script]
    defined = set(definitions(tree)) | {t.id for node in tree.body if isinstance(node, ast.Assign)
                                        for t in node.targets if isinstance(t, ast.Name)}
    defined |= {t.id for node in tree.body if isinstance(node, ast.If)
                for sub in ast.walk(node) if isinstance(sub, ast.Assign)
                for t in sub.targets if isinstance(t, ast.Name)}
    missing = REQUIRED_NAMES[script] - defined
    assert not missing, f"{script}.py lacks {sorted(missing)}"


def test_the_drift_guard_sees_every_kernel():
    """The comparisons above are only as good as their inputs: every file's kernels, by name."""
    gelu = {"compute_dtype", "gelu_forward_kernel", "gelu_backward_kernel"}
    square = {"square_forward_kernel", "square_backward_kernel"}
    buggy = {"gelu_backward_kernel_buggy_no_chain_rule"}
    expected = {
        "01_chained_expression": gelu | buggy, "02_graph_structure": gelu | square, "03_fan_in": gelu,
        "04_standalone_complete": gelu | square | buggy, "extras/train_mlp": gelu | buggy,
        "extras/triton_op": gelu | square, "extras/autograd_diagram": gelu | square | buggy,
        NOTEBOOK: gelu | square | buggy,
    }
    assert {name: set(kernels(tree)) for name, tree in TREES.items()} == expected
