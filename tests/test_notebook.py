"""notebooks/chapter17.ipynb and practice.ipynb: generated from the scripts and practice/, and they run.

The committed notebook carries an H200 run's outputs; these tests execute copies of it
and never rewrite it.
"""
import json
import os
import subprocess
import sys
import venv

import pytest
from chapter_scripts import REPO

NOTEBOOK = REPO / "notebooks/chapter17.ipynb"
PRACTICE = REPO / "notebooks/practice.ipynb"
sys.path.insert(0, str(REPO / "tools"))
sys.path.insert(0, str(REPO / "practice"))
import build_notebook  # noqa: E402
import build_practice_notebook  # noqa: E402
import run_notebook  # noqa: E402
from exercise_kit import EXERCISES  # noqa: E402

PRACTICE_UNSOLVED = f"0 of {len(EXERCISES)} solved"  # the practice notebook's last line before any edit


def test_the_committed_notebook_is_what_the_generator_makes():
    assert build_notebook.main(["--check"]) == 0, "regenerate: python tools/build_notebook.py"


def test_the_generator_notices_a_hand_edit(tmp_path):
    edited = json.loads(NOTEBOOK.read_text())
    edited["cells"][5]["source"] = "".join(edited["cells"][5]["source"]).replace("0.7071067811865476", "0.7071", 1)
    copy = tmp_path / "chapter17.ipynb"
    copy.write_text(json.dumps(edited))
    assert build_notebook.main(["--check", "--output", str(copy)]) == 1



def test_the_check_of_a_file_that_is_no_notebook_exits_2_with_one_line(tmp_path, capsys):
    """--check against a missing file, or one that is not a notebook: exit 2 and one line, not a traceback."""
    (tmp_path / "text.ipynb").write_text("not a notebook\n")
    for output in (tmp_path / "absent.ipynb", tmp_path / "text.ipynb"):
        assert build_notebook.main(["--check", "--output", str(output)]) == 2
        err = capsys.readouterr().err
        assert "no notebook to compare" in err and len(err.splitlines()) == 1, err


def test_the_runner_refuses_what_is_not_a_notebook_with_one_line(tmp_path, capsys):
    """tools/run_notebook.py on a missing file, a text file or JSON that is no notebook, or with --output a folder:
    exit 2 and one line, before a kernel starts (tracebacks before)."""
    pytest.importorskip("nbformat")
    (tmp_path / "empty.ipynb").write_text("{}")
    for args in ([str(tmp_path / "absent.ipynb")], [str(REPO / "README.md")], [str(tmp_path / "empty.ipynb")],
                 [str(NOTEBOOK), "--output-folder"]):
        output = str(tmp_path) if args[-1] == "--output-folder" else str(tmp_path / "out.ipynb")
        with pytest.raises(SystemExit) as exited:
            run_notebook.main([args[0], "--output", output])
        err = capsys.readouterr().err
        last = err.strip().splitlines()[-1]
        assert exited.value.code == 2 and "Traceback" not in err and "error:" in last, err
        assert "not a notebook to run" in last or "a folder" in last, err

def test_the_code_cells_are_the_scripts_verbatim():
    notebook = json.loads(NOTEBOOK.read_text())
    code = "\n".join("".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "code")
    script = (REPO / "04_standalone_complete.py").read_text()
    for name in ("def gelu_backward_kernel(", "class TritonGELU(", "def section_17_3("):
        start = script.index(name)
        block = script[start:script.index("\n\n\n", start)]
        assert block in code, f"04's {name} is not verbatim in the notebook"
    assert "def record_backward(" in code
    assert repr(build_notebook.expected_sections()) in code


def cell_text(cell):
    return "".join(cell["source"])


def test_the_lesson_comes_before_any_long_cell():
    """The first chapter result (17.1's run) comes before any code cell longer than 40 lines."""
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    first_result = next(i for i, c in enumerate(cells) if 'run_section("17.1", section_17_1)' in cell_text(c))
    longest = max(len(cell_text(c).splitlines()) for c in cells[:first_result + 1] if c["cell_type"] == "code")
    assert longest <= 40, f"a code cell of {longest} lines comes before the first result (cell {first_result})"
    assert "hardened_ops" not in "".join(cell_text(c) for c in cells) and "kernel_operands" not in cell_text(cells[4])


def test_the_recorder_is_collapsed_and_comes_after_the_first_result():
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    recorder = next(i for i, c in enumerate(cells) if "def record_backward(" in cell_text(c))
    first_result = next(i for i, c in enumerate(cells) if 'run_section("17.1", section_17_1)' in cell_text(c))
    assert recorder > first_result
    metadata = cells[recorder]["metadata"]  # an executed notebook adds its timings beside these
    assert metadata["cellView"] == "form" and metadata["jupyter"] == {"source_hidden": True}
    assert cell_text(cells[recorder]).startswith("# @title ")


def test_the_notebook_prints_what_the_book_prints_and_ends_with_the_questions():
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    code = "\n".join(cell_text(c) for c in cells if c["cell_type"] == "code")
    assert 'print("y.grad_fn.next_functions:", y.grad_fn.next_functions)' in code
    assert 'print("buggy chain x.grad:  ", x_buggy.grad.cpu())' in code
    summary = "".join(cell_text(c) for c in cells[-3:])
    assert summary.count("\n1. ") == 1 and "\n5. " in summary and "Self-check questions" in summary


def test_the_committed_notebook_shows_a_gpu_run():
    notebook = json.loads(NOTEBOOK.read_text())
    environment = "".join(run_notebook.output_text(notebook["cells"][1]))
    assert "compute capability" in environment, "commit the notebook with its outputs from a GPU run"
    assert run_notebook.output_text(notebook["cells"][-1]).rstrip().endswith("5 passed, 0 failed")


def test_the_notebook_runs_here_and_its_check_passes(tmp_path):
    executed = tmp_path / "executed.ipynb"
    assert run_notebook.main([str(NOTEBOOK), "--output", str(executed)]) == 0
    last = run_notebook.output_text(json.loads(executed.read_text())["cells"][-1])
    assert last.rstrip().endswith("5 passed, 0 failed"), last


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory):
    """A Python holding only torch, triton and numpy (the pinned ones) and ipykernel, nothing of this
    repository, and a Jupyter kernel named "alone" that runs it."""
    root = tmp_path_factory.mktemp("bare")
    environment = root / "env"
    venv.EnvBuilder(with_pip=True).create(environment)
    python = environment / "bin" / "python"
    pins = [line.split(";")[0].strip() for name in ("requirements.txt", "requirements-dev.txt")
            for line in (REPO / name).read_text().splitlines()
            if line.startswith(("torch==", "triton==", "numpy==", "ipykernel=="))
            and (";" not in line or eval_marker(line.split(";", 1)[1]))]
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "--retries", "1", "--timeout", "15", *pins],
                             capture_output=True, text=True, timeout=900)
    if install.returncode != 0 and "connection" in install.stderr.lower():
        pytest.skip(f"no package registry reachable to build the bare environment: {install.stderr[-300:]}")
    assert install.returncode == 0, install.stderr
    listed = subprocess.run([str(python), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True)
    installed = {line.split("==")[0].lower() for line in listed.stdout.splitlines()}
    assert not installed & {"pytest", "matplotlib", "nbclient"}, "the bare environment has more than it should"
    kernels = root / "jupyter" / "kernels" / "alone"
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "alone", "language": "python"}))
    return root / "jupyter"


@pytest.mark.parametrize("notebook, summary", [(NOTEBOOK, "5 passed, 0 failed"), (PRACTICE, PRACTICE_UNSOLVED)],
                         ids=["chapter17", "practice"])
def test_the_notebook_runs_alone_with_only_torch_triton_and_numpy(bare_python, tmp_path, notebook, summary):
    """What an upload amounts to: a folder holding only the notebook, and a kernel whose Python has
    nothing of this repository."""
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / notebook.name).write_bytes(notebook.read_bytes())
    run = subprocess.run([sys.executable, "-c", RUN_WITH_KERNEL, str(alone / notebook.name)], capture_output=True,
                         text=True, timeout=900, cwd=alone,
                         env={**os.environ, "JUPYTER_PATH": str(bare_python), "PYTHONPATH": ""})
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.rstrip().endswith(summary), run.stdout
    assert sorted(p.name for p in alone.iterdir()) == [notebook.name], "the run left files behind"


# --- the practice notebook -------------------------------------------------------

def test_the_committed_practice_notebook_is_what_the_generator_makes():
    assert build_practice_notebook.main(["--check"]) == 0, "regenerate: python tools/build_practice_notebook.py"


def execute(notebook, tmp_path):
    """The notebook (a dict) executed in a fresh kernel, beside an empty folder: its code cells' outputs."""
    import nbformat
    from nbclient import NotebookClient
    notebook = nbformat.from_dict(notebook)
    client = NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    return [run_notebook.output_text(cell) for cell in notebook.cells if cell.cell_type == "code"]


def test_the_practice_notebook_scores_the_learner_and_each_exercise_shows_its_trap(tmp_path):
    """Before any edit: the last cell says "0 of N solved", with each exercise's planted trap as its hint."""
    outputs = execute(json.loads(PRACTICE.read_text()), tmp_path)
    assert "5 of 5 answers shown as the chapter states them\n" in outputs
    assert any(out.startswith("check_backward(TritonGELU): clean") for out in outputs)
    lines = outputs[-1].rstrip().splitlines()
    assert lines[-1] == PRACTICE_UNSOLVED and "PASS" not in outputs[-1], outputs[-1]
    for exercise, line in zip(EXERCISES, lines):
        assert line.startswith(f"  not yet  {exercise.number}. {exercise.name}. Hint: ") and \
            f'"{exercise.planted}"' in line, line


def test_the_practice_notebooks_grading_passes_every_solution(tmp_path):
    """The same notebook with practice/solutions.py's classes in the exercises' cells: "N of N solved"."""
    outputs = execute(build_practice_notebook.build(solved=True), tmp_path)
    lines = outputs[-1].rstrip().splitlines()
    assert lines[-1] == f"{len(EXERCISES)} of {len(EXERCISES)} solved", outputs[-1]
    assert lines[:-1] == [f"  solved   {e.number}. {e.name}" for e in EXERCISES]


def test_the_practice_notebook_holds_no_solution_and_folds_its_support_code():
    cells = json.loads(PRACTICE.read_text())["cells"]
    text = "".join(cell_text(c) for c in cells)
    exercises = build_notebook.top_level_blocks(REPO / "practice/exercises.py")
    solutions = build_notebook.top_level_blocks(REPO / "practice/solutions.py")
    for exercise in EXERCISES:
        assert exercises[exercise.name].strip() in text, f"exercise {exercise.number} is not in the notebook verbatim"
        assert solutions[exercise.name].strip() not in text, f"solution {exercise.number} leaked in"
    assert "mul_backward_kernel" not in text and "silu_backward_kernel" not in text, "a solution leaked in"
    assert "from hardened_ops" not in text and "sys.path.insert" not in text, "the notebook must work alone"
    folded = [c for c in cells if c["metadata"].get("jupyter", {}).get("source_hidden")]
    assert [cell_text(c).splitlines()[0] for c in folded] == [
        "# @title The chapter's op, hardened (hardened_ops.py): kernels, checks, launch helpers",
        build_practice_notebook.CHECKER_TITLE.rstrip("\n")]
    assert text.count(build_practice_notebook.QUESTION_PROMPT) == 5


RUN_WITH_KERNEL = """
import sys
import nbformat
from nbclient import NotebookClient
notebook = nbformat.read(sys.argv[1], as_version=4)
NotebookClient(notebook, timeout=600, kernel_name="alone").execute()
print("".join(o.get("text", "") for o in notebook.cells[-1].outputs))
"""


def eval_marker(marker):
    from packaging.markers import Marker
    return Marker(marker).evaluate()
