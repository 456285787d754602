"""A new reader's first hour: every command README.md and docs/ print runs as written.

The README's setups end with `source .venv/bin/activate`, and the README says so once, for
itself and for docs/: after that, a bare `python` is the venv's. So every `python`, `torchrun`
and `uv run` command the pages print must name a script (or module) that exists, and the
cheap ones are run here exactly as printed, in a fresh clone with the venv activated.
"""
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest
from chapter_scripts import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL_BLOCKS = ("bash", "sh", "shell")  # every line a command
TRANSCRIPTS = ("console", "text", "")  # only the lines after a "$ " prompt
INTERPRETERS = ("python", "python3", ".venv/bin/python")


def printed_commands(page):
    """Each shell command a page prints: a line of a shell code block, or an inline code span."""
    text = page.read_text()
    for language, block in re.findall(r"```(\w*)\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            if language in TRANSCRIPTS and not line.startswith("$ "):
                continue
            if language in SHELL_BLOCKS or language in TRANSCRIPTS:
                line = re.sub(r"^\$ ", "", re.sub(r"\s+#.*$", "", line)).strip()
                if line:
                    yield line
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    yield from re.findall(r"`([^`\n]+)`", prose)


def simple_commands(command):
    """The parts of a command line joined by &&, ||, ; or |, each as its words."""
    for part in re.split(r"&&|\|\||;|\|", command):
        try:
            words = shlex.split(part)
        except ValueError:
            continue
        while words and re.match(r"^[A-Z_]+=", words[0]):  # VAR=value before the command
            words.pop(0)
        if words:
            yield words


def what_it_runs(words):
    """('script', path) or ('module', name) for a python, torchrun or uv run command, else None."""
    if words[0] in INTERPRETERS:
        rest = words[1:]
        while rest and rest[0].startswith("-"):
            if rest[0] == "-m" and len(rest) > 1:
                return "module", rest[1]
            if rest[0] == "-c":
                return None
            rest = rest[1:]
        return ("script", rest[0]) if rest else None
    if words[0] == "torchrun" or words[:2] == ["uv", "run"]:
        scripts = [w for w in words[1:] if w.endswith(".py")]
        return ("script", scripts[0]) if scripts else None
    return None


def python_commands(pages=PAGES):
    """(page, command as printed, what it runs) for every command that runs Python."""
    found = []
    for page in pages:
        for command in printed_commands(page):
            for words in simple_commands(command):
                runs = what_it_runs(words)
                if runs:
                    found.append((page, command, runs))
    return found


def test_the_pages_print_python_commands():
    """The extraction itself: it finds the README's and docs/practice.md's commands."""
    commands = {command for _, command, _ in python_commands()}
    assert "python practice/self_check.py" in commands, sorted(commands)
    assert "python practice/exercises.py" in commands, sorted(commands)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_printed_command_runs_something_that_exists(page):
    missing = []
    for _, command, (kind, name) in python_commands([page]):
        if kind == "script" and not re.fullmatch(r"[A-Z_]+\.py", name):  # SCRIPT.py stands for any script
            if not (REPO / name).is_file():
                missing.append(f"{command!r}: no {name}")
        elif kind == "module" and importlib.util.find_spec(name) is None:
            missing.append(f"{command!r}: no module {name}")
    assert not missing, f"{page.name} prints commands that cannot run as written:\n" + "\n".join(missing)


def test_the_readme_says_once_that_commands_run_in_the_activated_venv():
    readme = (REPO / "README.md").read_text()
    ways_in = readme.split("\n## Ways in\n", 1)[1].split("\n## ", 1)[0]
    intro = ways_in.split("\n|", 1)[0]
    assert "source .venv/bin/activate" in intro and "docs/" in intro, (
        "the README should say, before its setups, that every command here and in docs/ runs in the activated venv")
    cuda_row = next(line for line in readme.splitlines() if line.startswith("| read along (Linux, a CUDA GPU) |"))
    assert cuda_row.index("`make check`") < cuda_row.index("`source .venv/bin/activate`"), (
        "the GPU route should end with the venv activated")
    assert "source .venv/bin/activate" in (REPO / "docs/README.md").read_text(), "docs/README.md should say it too"


def no_gpu_steps():
    readme = (REPO / "README.md").read_text()
    section = readme.split("\n### Without a GPU\n", 1)[1].split("\n#", 1)[0]
    steps = re.findall(r"^\d+\. (.*(?:\n   .*)*)", section, re.M)
    return section, [re.findall(r"`([^`]+)`", step) for step in steps]


def test_the_no_gpu_route_is_numbered_steps_ending_in_the_activated_venv():
    section, steps = no_gpu_steps()
    commands = [spans[0] for spans in steps if spans]
    assert len(commands) == len(steps) >= 4, f"each step should carry its command: {steps}"
    pin = re.search(r"^torch==\S+", (REPO / "requirements.txt").read_text(), re.M)[0]
    assert commands[:4] == [
        "python3 -m venv .venv",
        f".venv/bin/pip install {pin} --index-url https://download.pytorch.org/whl/cpu",
        ".venv/bin/pip install -r requirements.txt",
        "./check_outputs.sh",
    ], commands
    assert commands[-1] == "source .venv/bin/activate", "the last step should activate the venv"
    note = section.split("> **Note:**", 1)
    assert len(note) == 2 and "62 s" in note[1] and "140 s" in note[1], (
        "the measurement's caveat belongs in a note under the steps: 62 s from a local copy, longer over a network")


# --- the cheap commands, run as printed ---------------------------------------------

# What the README prints for each, run as it is printed; each takes a few seconds.
CHEAP = {
    "01_chained_expression.py": lambda r: r.stdout == (REPO / "expected_output/01_chained_expression.txt").read_text(),
    "practice/self_check.py": lambda r: r.stdout.rstrip().endswith("5 of 5 answers shown as the chapter states them"),
    "practice/exercises.py": lambda r: re.search(r"^\d+ of \d+ solved$", r.stdout, re.M),
    "tools/listing_failures.py": lambda r: r.returncode == 0,
    "extras/autograd_diagram.py": lambda r: "TritonGELUBackward" in r.stdout,
}
EXPECTED_STATUS = {"practice/exercises.py": (0, 1)}  # 1 while an exercise is unsolved


def readme_commands_for(script):
    return sorted({command for _, command, (kind, name) in python_commands([REPO / "README.md"])
                   if kind == "script" and name == script and command.split()[0] in INTERPRETERS})


@pytest.fixture(scope="module")
def activated_clone(tmp_path_factory):
    """A fresh clone, its .venv this interpreter's (linked, as test_check_outputs does)."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs git and a git checkout to clone")
    clone = tmp_path_factory.mktemp("first-hour") / "clone"
    cloned = subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], capture_output=True, text=True,
                            timeout=300)
    assert cloned.returncode == 0, cloned.stderr
    activate = os.path.join(sys.prefix, "bin", "activate")
    if sys.prefix != sys.base_prefix and os.path.exists(activate):
        (clone / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    else:  # no venv runs the tests (make test PY=python3): a stand-in that puts this python first on PATH
        bin_dir = clone / ".venv/bin"
        bin_dir.mkdir(parents=True)
        (bin_dir / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        (bin_dir / "python").chmod(0o755)
        (bin_dir / "activate").write_text(f'PATH="{bin_dir}:$PATH"; export PATH; hash -r\n')
    return clone


def in_the_activated_venv(clone, command):
    """`command` in a shell as a reader's: no venv on PATH until `source .venv/bin/activate`."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    venv_bins = {os.path.join(sys.prefix, "bin"), str(REPO / ".venv/bin")}
    env["PATH"] = os.pathsep.join(d for d in env.get("PATH", "").split(os.pathsep)
                                  if d and os.path.realpath(d) not in {os.path.realpath(b) for b in venv_bins})
    return subprocess.run(["bash", "-c", f"source .venv/bin/activate && {command}"], cwd=clone, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("script", sorted(CHEAP))
def test_the_readmes_command_runs_as_printed_in_the_activated_venv(script, activated_clone):
    commands = readme_commands_for(script)
    assert commands, f"the README no longer prints a command for {script}: update CHEAP"
    for command in commands:
        result = in_the_activated_venv(activated_clone, command)
        assert result.returncode in EXPECTED_STATUS.get(script, (0,)), f"{command!r}:\n{result.stdout}{result.stderr}"
        assert CHEAP[script](result), f"{command!r} printed:\n{result.stdout}{result.stderr}"
        assert "ModuleNotFoundError" not in result.stderr, result.stderr


# --- the test suite, as docs/tests.md describes it -----------------------------------

def test_docs_tests_md_quotes_about_as_many_tests_as_are_collected():
    tests_md = (REPO / "docs/tests.md").read_text()
    quoted = re.search(r"about ([\d,]+) tests", tests_md)
    assert quoted, "docs/tests.md should say about how many tests make test runs"
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
                               cwd=REPO, capture_output=True, text=True, timeout=300)
    count = int(re.search(r"^(\d+) tests? collected", collected.stdout, re.M)[1])
    about = int(quoted[1].replace(",", ""))
    assert abs(count - about) <= 0.15 * count, f"docs/tests.md says about {about} tests; {count} are collected"
    assert re.search(r"\d+ to\s+\d+\s+minutes", tests_md), "docs/tests.md should say how long make test takes"


def test_the_exercises_section_says_solving_in_place_fails_make_test_and_what_to_do():
    practice = (REPO / "docs/practice.md").read_text()
    exercises = practice.split("\n## The exercises\n", 1)[1].split("\n## ", 1)[0]
    for needed in ("`make test`", "tests/test_exercises.py", "git stash", "git stash pop"):
        assert needed in exercises, f"docs/practice.md's exercises section should say {needed}"
    readme = (REPO / "README.md").read_text()
    practise = next(line for line in readme.splitlines() if line.startswith("| practise |"))
    assert "`make test`" in practise and "docs/practice.md#the-exercises" in practise
