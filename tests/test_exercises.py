"""practice/: the exercises, their solutions and what they share (exercise_kit.py), and the self-check.

Each unsolved exercise must show exactly the trap it plants, each solution must pass, the
learner's score must read "K of N solved" with a hint for each unsolved exercise, and the
answer key must not depend on the file the learner edits. The self-check must answer all
five questions, and --predict must echo, compare and end cleanly when input runs out.
"""
import ast
import shutil
import subprocess
import sys

import pytest
import torch
from chapter_scripts import REPO, seeded_randn

sys.path.insert(0, str(REPO / "practice"))
import exercise_kit  # noqa: E402
import exercises  # noqa: E402
import self_check  # noqa: E402
import solutions  # noqa: E402

EXERCISES = exercise_kit.EXERCISES
IDS = [f"{e.number}-{e.name}" for e in EXERCISES]


def run(*args, stdin=None):
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, timeout=600, cwd=REPO,
                          input=stdin)


# --- the exercises and their solutions ---------------------------------------------

@pytest.mark.parametrize("exercise", EXERCISES, ids=IDS)
def test_each_unsolved_exercise_fails_with_the_trap_it_plants(exercise):
    report = exercise_kit.grade(exercise, exercises)
    assert report.traps == [exercise.planted], str(report)


@pytest.mark.parametrize("exercise", EXERCISES, ids=IDS)
def test_each_solution_passes(exercise):
    report = exercise_kit.grade(exercise, solutions)
    assert report.clean, str(report)


def test_each_exercise_has_a_solution_and_its_own_inputs():
    for exercise in EXERCISES:
        assert issubclass(getattr(exercises, exercise.name), torch.autograd.Function)
        assert getattr(solutions, exercise.name) is not getattr(exercises, exercise.name)
        args = exercise.inputs()
        assert isinstance(args, tuple) and any(isinstance(a, torch.Tensor) and a.is_floating_point() for a in args)


def test_the_two_input_solution_returns_two_gradients_and_none_where_none_is_needed():
    x, y = exercise_kit.two_inputs()
    x.requires_grad_(True)
    out = solutions.TritonMul.apply(x, y)
    grad_output = seeded_randn(3, 5, seed=40).t().contiguous().t()
    with torch.no_grad():
        returned = solutions.TritonMul.backward(out.grad_fn, grad_output)
    assert returned[1] is None and torch.allclose(returned[0], grad_output * y)


# --- no circle: the answer key never depends on the learner's file -----------------

def imported_modules(path):
    tree = ast.parse(path.read_text())
    return {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)} | {
        alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}


def test_solutions_and_the_kit_never_import_the_exercises():
    assert "exercises" not in imported_modules(REPO / "practice/solutions.py")
    assert not {"exercises", "solutions"} & imported_modules(REPO / "practice/exercise_kit.py")
    loaded = run("-c", "import sys; sys.path.insert(0, 'practice'); import solutions; "
                 "print(sorted(m for m in sys.modules if m in ('exercises', 'exercise_kit', 'solutions')))")
    assert loaded.stdout.strip() == "['exercise_kit', 'solutions']", loaded.stdout + loaded.stderr


def test_an_edit_to_an_exercise_leaves_the_solutions_as_they_were(tmp_path):
    """A learner's broken exercises.py (a helper redefined wrongly) changes nothing in solutions.py's grading."""
    practice = tmp_path / "practice"
    shutil.copytree(REPO / "practice", practice, ignore=shutil.ignore_patterns("__pycache__"))
    (practice / "exercises.py").write_text("raise SystemExit('the learner broke this file')\n")
    (tmp_path / "hardened_ops.py").write_text((REPO / "hardened_ops.py").read_text())
    shutil.copytree(REPO / "backward-check" / "backward_check", tmp_path / "backward-check" / "backward_check",
                    ignore=shutil.ignore_patterns("__pycache__"))  # the package, beside practice/ as in the repository
    result = subprocess.run([sys.executable, "practice/solutions.py", "--only", "1", "--only", "8"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and result.stdout.rstrip().endswith("2 of 2 solved"), result.stdout + result.stderr


# --- the learner's score -------------------------------------------------------------

def test_the_exercises_score_the_learner_with_a_hint_for_each_unsolved_one():
    unsolved = run("practice/exercises.py")
    assert unsolved.returncode == 1, unsolved.stdout + unsolved.stderr
    lines = unsolved.stdout.splitlines()
    assert lines[-1] == f"0 of {len(EXERCISES)} solved"
    assert "PASS" not in unsolved.stdout
    for exercise, line in zip(EXERCISES, lines):
        assert line.startswith(f"  not yet  {exercise.number}. {exercise.name}. Hint: ")
        assert f'"{exercise.planted}"' in line, line


def test_the_solutions_score_n_of_n_both_ways():
    result = run("practice/solutions.py")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == f"{len(EXERCISES)} of {len(EXERCISES)} solved", result.stdout
    assert all(line.startswith("  solved   ") for line in result.stdout.splitlines()[:-1])
    through_exercises = run("practice/exercises.py", "--solutions", "--only", "2", "--only", "12")
    assert through_exercises.returncode == 0 and through_exercises.stdout.splitlines() == [
        "  solved   2. GELUFirstElement", "  solved   12. CrossEntropyInPlace", "2 of 2 solved"], through_exercises.stdout


def test_only_grades_the_chosen_ones_with_the_checkers_whole_report():
    result = run("practice/exercises.py", "--only", "1", "--only", "8")
    assert result.returncode == 1
    assert result.stdout.splitlines()[-1] == "0 of 2 solved"
    assert "check_backward(1. GELUNoChainRule)" in result.stdout and "its backward is not written yet" in result.stdout
    assert "2. GELUFirstElement" not in result.stdout


@pytest.mark.parametrize("args", [("--only", "99"), ("--only", "x"), ("--nope",), ("--only",)])
@pytest.mark.parametrize("module", [exercises, solutions], ids=["exercises", "solutions"])
def test_bad_arguments_exit_2_with_one_line(module, args, capsys):
    with pytest.raises(SystemExit) as exited:
        module.main(list(args))
    out, err = capsys.readouterr()
    assert exited.value.code == 2 and out == "" and len(err.splitlines()) == 1, err
    if args == ("--only", "99"):
        assert f"they are 1 to {len(EXERCISES)}" in err


def test_a_bad_argument_from_the_terminal_exits_2_with_one_line():
    result = run("practice/exercises.py", "--only", "99")
    assert result.returncode == 2 and result.stdout == "", result.stdout + result.stderr
    assert result.stderr == f"practice/exercises.py: no exercise numbered 99: they are 1 to {len(EXERCISES)} (see --help)\n"


# --- the self-check questions ----------------------------------------------------

def test_the_self_check_answers_all_five():
    result = run("practice/self_check.py")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "5 of 5 answers" in out
    assert "['SumBackward0', 'TritonSquare.backward', 'TritonGELU.backward']" in out
    assert "calls: 1, grad_output: tensor([2., 2., 2., 2.])" in out
    assert run("practice/self_check.py", "6").returncode == 2


PREDICTIONS = {  # a right and a wrong prediction for each question
    1: ("loss = (2*z + 1).SUM()", "x.grad"),
    2: ("TritonSquare.backward, then TritonGELU.backward", "GELU first, then Square"),
    3: ("they are the very same node", "they print alike"),
    4: ("once, with 2 everywhere", "twice, with 1"),
    5: ("it is summed over every path", "it is random"),
}


@pytest.mark.parametrize("args", [["6"], ["\u00b2"], ["x"], ["--predict", "0"]])
def test_self_check_refuses_a_question_it_has_not_with_its_usage(args, capsys):
    """Only 1 to 5 are questions ('\u00b2' is a digit to str.isdigit, and int() refuses it): exit 2, the usage line."""
    assert self_check.main(args) == 2
    assert capsys.readouterr().err.startswith("usage: python practice/self_check.py")
    assert self_check.main(["--help"]) == 0 and capsys.readouterr().out.startswith("usage:")


@pytest.mark.parametrize("number", sorted(PREDICTIONS))
def test_a_prediction_is_compared_forgivingly(number):
    right, wrong = PREDICTIONS[number]
    assert self_check.ANSWERS[number].matches(right) and not self_check.ANSWERS[number].matches(wrong)


def test_numbers_are_compared_as_numbers_in_order():
    assert self_check.numbers_in("Once: grad_output tensor([2., 2., 2., 2.])") == [1, 2.0]
    assert self_check.ANSWERS[4].matches("1 call; grad_output = 2.0")
    assert not self_check.ANSWERS[4].matches("2 calls, each 1")


def test_predict_echoes_each_answer_beside_the_evidence_and_says_whether_it_matched():
    result = run("practice/self_check.py", "--predict", "1", "4", stdin="(2 * z + 1).sum()\ntwice, with 1\n")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "You predicted:    (2 * z + 1).sum()" in out and "You predicted:    twice, with 1" in out
    first, second = out.split("Q4.")
    assert "TritonGELU.backward received" in first and first.index("received") < first.index("You predicted")
    assert "Matched." in first and "Not matched" in second and "The chapter says: once" in second
    assert out.rstrip().endswith("1 of 2 of your predictions matched the chapter's answer")


@pytest.mark.parametrize("args, answers", [
    pytest.param(("--predict",), "", id="all five, no input"),
    pytest.param(("--predict",), "2*z + 1\nsquare, then gelu\n", id="all five, two answers"),
    pytest.param(("--predict", "3"), "", id="one, no input")])
def test_predict_ends_cleanly_when_input_runs_out(args, answers):
    result = run("practice/self_check.py", *args, stdin=answers)
    assert result.returncode == 0 and "Traceback" not in result.stderr + result.stdout, result.stdout + result.stderr
    last = result.stdout.rstrip().splitlines()[-1]
    assert last.startswith("Input ended: stopped before the evidence of question"), last
    given = answers.count("\n")
    assert f"{given} of {given} predictions matched so far" in last


def test_exercise_8_asks_for_needs_input_grad_and_grades_it():
    """A TritonMul.backward that always returns both gradients is legal (autograd drops the unneeded one),
    but not what exercise 8 asks: it is not solved, and its hint says what is missing."""
    class BothAlways(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            ctx.save_for_backward(x, y)
            return x * y

        @staticmethod
        def backward(ctx, grad_output):
            x, y = ctx.saved_tensors
            return grad_output * y, grad_output * x

    exercise = next(e for e in EXERCISES if e.name == "TritonMul")
    report = exercise_kit.grade(exercise, type("Learner", (), {"TritonMul": BothAlways}))
    assert report.clean and not exercise_kit.is_solved(exercise, report), str(report)
    assert "ctx.needs_input_grad" in exercise_kit.hint(exercise, report)
    assert exercise_kit.is_solved(exercise, exercise_kit.grade(exercise, solutions))
