"""
Real test suites of CPU libraries under the backward-check plugin, each finding decided by a probe
====================================================================================================

The plugin's first run on a library it was never tuned for: does it stay quiet on right code? Each
suite below is a library whose autograd.Functions are plain PyTorch (so they run on the CPU), and
whose own tests are run unmodified, from its repository at the release's tag, against that release:
plain, then under `pytest --backward-check` (backward-check/pytest_backward_check.py, defaults),
which checks each Function the tests call, with no reference (finite differences). Every trap the
plugin names is then decided by a probe of its own in research/wild/cpu_probes.py: a short plain-torch
script, run against the same release, that says whether the finding is real (the backward is wrong
for the grad_output, layout or input the checker used), by design (the library wrote it on purpose,
at a line the probe names), or a false alarm (the backward is right; the probe says what the checker
got wrong, e.g. the input's contract).

    python research/wild/cpu_suites.py --list                                     # the suites and the findings
    python research/wild/cpu_suites.py --download [DIR] --git entmax=CLONE ...    # network: every suite's clone
    python research/wild/cpu_suites.py --run [DIR] [--suite NAME] [--log PATH]    # no network, no GPU

--download (DIR defaults to .wild-cpu-suites, which git ignores) needs the network and a local clone of
each library's repository (a bare or mirror clone does too; --list names them). For each suite it
installs the release and its pinned needs with `pip install --no-deps --target DIR/<dist>-<version>/site`
(torch is the running Python's own, never installed), and extracts the test files the suite runs, with
what they import beside them, from the release's tag (or the commit the release was built from, where
the repository has no tag) into DIR/<dist>-<version>/tests, paths kept (`git archive`).
DIR/<dist>-<version>/SOURCE says which revision and what was installed.

--run needs neither. Each suite runs as `python -m pytest FILES -q -p no:cacheprovider -c /dev/null
--rootdir .` in its tests folder (none of these libraries has a pytest configuration of its own, and
the repository's pytest.ini must not apply to them), with PYTHONPATH holding the release's site (and
backward-check/ for the plugin's run), one suite at a time, each run killed past --timeout. Then each
finding's probe runs in a fresh Python with the same PYTHONPATH. The log (default
benchmarks/results/cpu_suites.log) begins with tools/stamp.py's stamp, then holds each run's command
and whole output, each probe's answer, and the table the docs quote.

The findings are today's checker's: the table says which it names and what each is. A false alarm
that a fix to the checker removes shows as "no longer named", which is the point; a real or by-design
finding that is no longer named is a check lost, and fails the run.

Exit status: 0 every suite ran, every finding the plugin named has a probe, and every probe agrees
with what FINDINGS says of it; 1 otherwise (a finding with no probe, a probe that disagrees, a real or
by-design finding no longer named, a suite that timed out); 2 a usage error, or a suite not downloaded.
"""
import argparse
import dataclasses
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "backward-check"
PROBE_SCRIPT = Path(__file__).resolve().parent / "cpu_probes.py"
DEFAULT_DIR = REPO / ".wild-cpu-suites"
DEFAULT_LOG = REPO / "benchmarks" / "results" / "cpu_suites.log"
sys.path[:0] = [str(REPO / "research"), str(REPO / "tools")]
sys.path.insert(0, str(REPO / "research" / "wild"))
from in_the_wild import table  # noqa: E402
from suites import extract_tests, git_dir, outcome, plugin_findings  # noqa: E402
from cpu_probes import BY_DESIGN, FALSE_ALARM, PROBE_MARK, PROBES, REAL  # noqa: E402  (imports torch, not the libraries)


@dataclasses.dataclass(frozen=True)
class CpuSuite:
    name: str                 # the name --git and --suite take
    dist: str                 # the package's name on PyPI
    version: str
    repository: str           # owner/name on GitHub
    revision: str             # the release's tag, or the commit its wheel was built from (the tag's absence said in why)
    tests: tuple              # the test files run, as they are at the revision
    why: str                  # why these files: what they reach, what was left out and why
    support: tuple = ()       # files beside them that they import or read
    needs: tuple = ()         # pinned pip specs the release or its tests import, installed beside it (never torch)

    def tag(self, version):   # as research/wild/suites.py's extract_tests asks a case for its revision
        return self.revision


@dataclasses.dataclass(frozen=True)
class Decided:
    """One finding of the plugin, and how its probe decided it."""
    suite: str
    op: str                   # module.qualname, as the plugin's table names it
    trap: str                 # the trap's name (backward_check.report.TRAPS)
    kind: str                 # REAL, BY_DESIGN or FALSE_ALARM
    probe: str                # the function in research/wild/cpu_probes.py that decides it
    cause: str                # in a sentence: the bug, the design (with a link to the line), or what the checker got wrong


SCIPY = "scipy==1.17.1"

SUITES = (
    CpuSuite("torchdiffeq", "torchdiffeq", "0.2.5", "rtqichen/torchdiffeq", "a88aac5",
             ("tests/gradient_tests.py",),
             why="The file of its gradient tests, which reaches every Function it has: odeint_adjoint's "
                 "OdeintAdjointMethod, and the helpers the solvers call on every step (_UncheckedAssign, "
                 "_StitchGradient). The whole suite (run_all.py's five files) ran 13 of its 22 tests in 900 s plain "
                 "on a shared two-core machine, so only this file runs. The repository has no tags: 0.2.5's wheel is "
                 "byte for byte the tree of commit a88aac5 ('upd version').",
             support=("tests/problems.py",), needs=(SCIPY,)),
    CpuSuite("linear_operator", "linear-operator", "0.6.1", "cornellius-gp/linear_operator", "v0.6.1",
             ("test/functions",),
             why="test/functions, the eight files that test its Functions one by one (Solve, InvQuad, "
                 "InvQuadLogdet, Matmul, PivotedCholesky, RootDecomposition, Diagonalization, DSMM); test/operators "
                 "and test/utils, 48 more files, reach the same Functions through its operators.",
             support=("test/__init__.py",), needs=(SCIPY,)),
    CpuSuite("pytorch_wavelets", "pytorch-wavelets", "1.3.0", "fbcotter/pytorch_wavelets", "9a0c507",
             ("tests/test_dwt.py", "tests/test_dwt1d.py"),
             why="The two files of its discrete wavelet transforms, whose analysis and synthesis filter banks are "
                 "autograd.Functions (AFB2D, SFB2D, AFB1D, SFB1D); their gradient tests backpropagate a random "
                 "grad_output through 128 x 128 images. tests/test_dtcwt.py is left out: 86 of its tests fail "
                 "plain, its numpy reference calling np.asfarray (gone in NumPy 2) and its module setup() being "
                 "nose's, which pytest 8 no longer calls; the files of gradcheck tests are skipped by the library "
                 "itself ('take a very long time'). The repository has no tag past 1.1.0: 1.3.0's wheel is byte "
                 "for byte the tree of commit 9a0c507.",
             needs=("six==1.17.0", "PyWavelets==1.9.0",
                    "setuptools==75.8.0")),   # pytorch_wavelets imports pkg_resources, gone from setuptools 81 on
    CpuSuite("entmax", "entmax", "1.3", "deep-spin/entmax", "v1.3",
             ("entmax/test_losses.py", "entmax/test_mask.py", "entmax/test_root_finding.py", "entmax/test_topk.py"),
             why="The whole suite: sparsemax, 1.5-entmax, the bisection entmax/normmax/budget mappings and their "
                 "losses are autograd.Functions, and the tests call each with X (and alpha) requiring grad "
                 "(gradcheck in float64)."),
)
SUITE_BY_NAME = {s.name: s for s in SUITES}

TORCHDIFFEQ_SAYS = ("the forward writes the value into its scratch buffer in place on purpose ('sneak past the version "
                    "checker'), and the backward passes an overwritten slot's gradient on; its one caller writes each "
                    "slot of a fresh torch.empty buffer once, so that gradient reaches nothing")
PADDING_MODES = ("in the padding modes 'symmetric' and 'reflect' the backward runs the other filter bank in the same "
                 "mode, which is the transform's adjoint only for zero padding: the padded samples' gradient is never "
                 "folded back onto the border")
SYMMETRIC = ("the backward is right for symmetric matrices, its callers' contract; the checker's general directions "
             "step outside it")

FINDINGS = (
    Decided("torchdiffeq", "torchdiffeq._impl.adjoint.OdeintAdjointMethod", "crashes", FALSE_ALARM,
            "torchdiffeq_adjoint_frozen", "an input frozen that no caller freezes: the backward raises with a frozen "
            "parameter among adjoint_params, and odeint_adjoint drops frozen parameters before it calls the Function"),
    Decided("torchdiffeq", "torchdiffeq._impl.rk_common._UncheckedAssign", "writes into an input or a saved tensor",
            BY_DESIGN, "torchdiffeq_unchecked_assign", TORCHDIFFEQ_SAYS),
    Decided("torchdiffeq", "torchdiffeq._impl.rk_common._UncheckedAssign", "a wrong formula", BY_DESIGN,
            "torchdiffeq_unchecked_assign", TORCHDIFFEQ_SAYS),
    Decided("torchdiffeq", "torchdiffeq._impl.misc._StitchGradient", "a wrong formula", BY_DESIGN,
            "torchdiffeq_stitch_gradient", "a straight-through gradient: the next float after x1, with x1's gradient"),
    Decided("linear_operator", "linear_operator.functions._solve.Solve", "a wrong formula", FALSE_ALARM,
            "linear_operator_solve", SYMMETRIC),
    Decided("linear_operator", "linear_operator.functions._inv_quad.InvQuad", "a wrong formula", FALSE_ALARM,
            "linear_operator_inv_quad", SYMMETRIC),
    Decided("linear_operator", "linear_operator.functions._pivoted_cholesky.PivotedCholesky", "a wrong formula",
            FALSE_ALARM, "linear_operator_pivoted_cholesky", SYMMETRIC + ", and its grown input is neither symmetric "
            "nor positive definite"),
    Decided("linear_operator", "linear_operator.functions._root_decomposition.RootDecomposition", "a wrong formula",
            BY_DESIGN, "linear_operator_root_decomposition", "the backward gives the gradient of R R^T, the only way a "
            "caller reads a root (any rotation of R is another root)"),
    Decided("linear_operator", "linear_operator.functions._inv_quad_logdet.InvQuadLogdet", "a wrong formula",
            BY_DESIGN, "linear_operator_inv_quad_logdet", "a stochastic log-determinant: the backward estimates the "
            "exact value's gradient with the forward's probe vectors, unbiased, on purpose"),
    Decided("pytorch_wavelets", "pytorch_wavelets.dwt.lowlevel.SFB2D", "returns the wrong gradients", REAL,
            "pytorch_wavelets_sfb2d", "the backward gives the highpass coefficients no gradient when the lowpass is "
            "frozen: both gradients hang on ctx.needs_input_grad[0]"),
    Decided("pytorch_wavelets", "pytorch_wavelets.dwt.lowlevel.SFB1D", "returns the wrong gradients", REAL,
            "pytorch_wavelets_sfb1d", "the same in one dimension (reported upstream as issue 65)"),
    Decided("pytorch_wavelets", "pytorch_wavelets.dwt.lowlevel.AFB2D", "a wrong formula", REAL,
            "pytorch_wavelets_afb2d_modes", PADDING_MODES),
    Decided("pytorch_wavelets", "pytorch_wavelets.dwt.lowlevel.AFB1D", "a wrong formula", REAL,
            "pytorch_wavelets_afb1d_modes", PADDING_MODES),
    Decided("pytorch_wavelets", "pytorch_wavelets.dwt.lowlevel.SFB2D", "a wrong formula", REAL,
            "pytorch_wavelets_sfb2d_modes", PADDING_MODES),
    Decided("pytorch_wavelets", "pytorch_wavelets.dwt.lowlevel.SFB1D", "a wrong formula", REAL,
            "pytorch_wavelets_sfb1d_modes", PADDING_MODES),
)
assert all(d.probe in PROBES for d in FINDINGS), "every finding's probe is a function of cpu_probes.py"



def release_dir(root, suite):
    return Path(root) / f"{suite.dist}-{suite.version}"


# ---------------------------------------------------------------------------
# --download
# ---------------------------------------------------------------------------

def pip_install(specs, target):
    """specs (NAME==VERSION), with no dependencies, into target, for the running Python."""
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile",
               "--disable-pip-version-check", "--target", str(target), *specs]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"pip could not install {' '.join(specs)}: {done.stderr.strip()[-300:]}")


def download(root, clones, suites):
    for suite in suites:
        release = release_dir(root, suite)
        shutil.rmtree(release, ignore_errors=True)
        specs = [f"{suite.dist}=={suite.version}", *suite.needs]
        pip_install(specs, release / "site")
        commit, extracted = extract_tests(clones[suite.name], suite, suite.version, release / "tests")
        (release / "SOURCE").write_text(
            f"{suite.repository} {suite.revision} {commit}\n"
            + "".join(f"pip install --no-deps {spec}\n" for spec in specs)
            + "".join(f"tests/{name}\n" for name in extracted))
        print(f"{suite.name}: {' '.join(specs)}; tests from {suite.revision} ({commit[:12]}): {', '.join(extracted)}")
    return 0


# ---------------------------------------------------------------------------
# --run
# ---------------------------------------------------------------------------

@dataclasses.dataclass
class Ran:
    label: str
    command: list
    code: int = None          # exit status; None: timed out
    seconds: float = 0.0
    output: str = ""
    interrupted: bool = False  # suites.outcome reads it; a run here is killed past its deadline (code None), never interrupted


def environment(paths):
    paths = [str(p) for p in paths] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths), PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1",
                COLUMNS="200")  # the plugin's table in its wide layout, as the logs show it


def run_command(label, command, cwd, paths, timeout):
    """command in cwd, in a process group of its own (the plugin's worker included), killed whole past timeout."""
    ran = Ran(label, command)
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, env=environment(paths), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        ran.output, _ = process.communicate(timeout=timeout)
        ran.code = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        ran.output, _ = process.communicate()
        ran.output += f"\n(killed after {timeout} s)\n"
    ran.seconds = time.perf_counter() - started
    return ran


def suite_runs(root, suite, timeout):
    """The suite plain, then under the plugin; (plain, checked)."""
    release = release_dir(root, suite).resolve()
    command = [sys.executable, "-m", "pytest", *suite.tests, "-q", "-p", "no:cacheprovider", "-c", os.devnull,
               "--rootdir", "."]
    plain = run_command(f"{suite.name} {suite.version}, plain", command, release / "tests", [release / "site"],
                        timeout)
    checked = run_command(f"{suite.name} {suite.version}, with the plugin",
                          command + ["-p", "pytest_backward_check", "--backward-check"], release / "tests",
                          [PACKAGE, release / "site"], timeout)
    return plain, checked


def table_ops(output):
    """The op names of the plugin's closing table, in its order (lines that start in column 0 after its rule)."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if re.fullmatch(r"=+ backward-check =+", line.strip())), None)
    if start is None:
        return []
    ops = []
    for line in lines[start + 2:]:  # past the rule and the column heads
        if re.match(r"\d+ calls? of \d+ ops? checked", line) or re.match(r"[-=_]{3,}", line):
            break
        if line and not line[0].isspace() and not line.startswith(("not recorded:", "no autograd.Function")):
            ops.append(line.strip())
    return ops


def failed_tests(output):
    """The node ids of pytest's short summary: 'FAILED id - why' and 'ERROR id - why' lines."""
    return {m.group(1) for m in re.finditer(r"^(?:FAILED|ERROR) (\S+)", output, re.MULTILINE)}


def findings_of(suite, output, traps):
    """{op: (trap names found, the op's rows)} for every op of the plugin's table."""
    return {op: plugin_findings(output, op, traps) for op in table_ops(output)}


def run_probe(root, suite, probe, timeout):
    """The probe's answer: {kind, evidence}, or {kind: None, evidence: why it gave none}."""
    release = release_dir(root, suite).resolve()
    ran = run_command(f"probe {probe}", [sys.executable, str(PROBE_SCRIPT), probe], release / "tests",
                      [release / "site"], timeout)
    answer = next((line[len(PROBE_MARK):] for line in ran.output.splitlines() if line.startswith(PROBE_MARK)), None)
    if answer is None:
        tail = " ".join(ran.output.split())[-300:]
        return ran, dict(kind=None, evidence=f"no answer (exit {ran.code}): {tail}")
    return ran, json.loads(answer)


def header():
    import platform
    import torch
    from stamp import lines
    return [*lines(), f"python {platform.python_version()}, torch {torch.__version__}, CPU only",
            f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
            f"command: {shlex.join(['python', 'research/wild/cpu_suites.py', *sys.argv[1:]])}",
            "runs: one at a time; times are wall clock, python start to exit, on a machine others may share"]


TABLE_HEADS = ("suite", "plain", "with plugin", "plain s", "plugin s", "op", "plugin's verdict", "finding",
               "probe says")


def run_everything(root, suites, timeout, log):
    sys.path.insert(0, str(PACKAGE))
    from backward_check.report import TRAPS
    rows, ok, answers, false_alarms = [], True, {}, 0

    def write(text):
        with open(log, "a") as out:
            out.write(text.rstrip() + "\n")

    for suite in suites:
        plain, checked = suite_runs(root, suite, timeout)
        for ran in (plain, checked):
            print(f"{ran.label}: {outcome(ran)} in {ran.seconds:.0f} s", flush=True)
            write(f"\n===== {ran.label}\ncommand: {shlex.join(ran.command)}\n"
                  f"exit: {'timed out' if ran.code is None else ran.code} after {ran.seconds:.1f} s\n\n{ran.output}")
        ok &= plain.code is not None and checked.code is not None
        broken = sorted(failed_tests(checked.output) - failed_tests(plain.output))
        if broken:  # the plugin must never fail a test in report mode: that is the plugin's bug, not the library's
            ok = False
            print(f"{suite.name}: {len(broken)} test(s) fail only under the plugin: {', '.join(broken)}")
            rows.append((suite.name, outcome(plain), outcome(checked), f"{plain.seconds:.0f}", f"{checked.seconds:.0f}",
                         "(the plugin itself)", f"failed {len(broken)} test(s) that pass plain", "-",
                         "THE PLUGIN'S BUG: see the log for its traceback"))
        found = findings_of(suite, checked.output, TRAPS)
        named = {(op, trap) for op, (traps, _) in found.items() for trap in traps}
        first = not broken
        for op, (traps, op_rows) in found.items():
            verdicts = "; ".join(dict.fromkeys(row.split("  ")[-1].strip() for row in op_rows))
            for trap in traps or [None]:
                decided = next((d for d in FINDINGS if (d.suite, d.op, d.trap) == (suite.name, op, trap)), None)
                if trap is None:
                    finding, said = "-", "-"
                elif decided is None:
                    finding, said, ok = trap, "NO PROBE: decide it", False
                else:
                    if decided.probe not in answers:  # a probe that decides two findings runs once
                        probe_ran, answers[decided.probe] = run_probe(root, suite, decided.probe, timeout)
                        write(f"\n===== probe {decided.probe} ({suite.name}: {op})\n{probe_ran.output}")
                    answer = answers[decided.probe]
                    false_alarms += decided.kind == FALSE_ALARM
                    agrees = answer["kind"] == decided.kind
                    ok &= agrees
                    finding = f"{trap}: {decided.kind}"
                    said = answer["evidence"] if agrees else f"DISAGREES ({answer['kind']}): {answer['evidence']}"
                cells = (suite.name, outcome(plain), outcome(checked), f"{plain.seconds:.0f}", f"{checked.seconds:.0f}") \
                    if first else ("", "", "", "", "")
                rows.append((*cells, op, verdicts, finding, said))
                first = False
        for gone in [d for d in FINDINGS if d.suite == suite.name and (d.op, d.trap) not in named]:
            lost = gone.kind != FALSE_ALARM
            ok &= not lost
            rows.append((suite.name if first else "", "", "", "", "", gone.op, "-", f"{gone.trap}: {gone.kind}",
                         "LOST: no longer named" if lost else "no longer named (the false alarm is gone)"))
            first = False
    summary = ["", table(TABLE_HEADS, rows), "",
               f"{sum(1 for r in rows if r[7] != '-' and r[6] != '-')} findings named; {false_alarms} of them false alarms"]
    print("\n".join(summary))
    write("\n".join(summary))
    return ok


def print_suites():
    for s in SUITES:
        print(f"{s.name}: {s.dist} {s.version}, tests from https://github.com/{s.repository} at {s.revision} "
              f"(--git {s.name}=CLONE)")
        print(f"   tests: {' '.join(s.tests)}; beside them: {', '.join(s.support) or 'nothing'}; "
              f"installed beside: {', '.join(s.needs) or 'nothing'}")
        print(f"   why: {s.why}")
        for d in FINDINGS:
            if d.suite == s.name:
                print(f"   finding: {d.op}: {d.trap}: {d.kind} (probe {d.probe}): {d.cause}")


def main(argv=None):
    parser = argparse.ArgumentParser(description="Run CPU libraries' own test suites plain and under pytest "
                                                 "--backward-check, and decide each finding by a probe.")
    parser.add_argument("--download", nargs="?", const=DEFAULT_DIR, type=Path, metavar="DIR",
                        help="install the releases and extract their tests into DIR (default .wild-cpu-suites)")
    parser.add_argument("--git", action="append", default=[], metavar="NAME=PATH",
                        help="a local clone of a suite's repository, for --download (names: "
                             + ", ".join(s.name for s in SUITES) + ")")
    parser.add_argument("--run", nargs="?", const=DEFAULT_DIR, type=Path, metavar="DIR",
                        help="run every suite in DIR (default .wild-cpu-suites) and probe each finding")
    parser.add_argument("--list", action="store_true", help="list the suites and the findings decided, and stop")
    parser.add_argument("--suite", action="append", choices=list(SUITE_BY_NAME), help="only this suite")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds one run may take (default 1800)")
    parser.add_argument("--log", type=Path, default=DEFAULT_LOG, help="the log (default %(default)s)")
    args = parser.parse_args(argv)
    if args.timeout < 1:
        parser.error(f"--timeout is the seconds one run may take, 1 or more, not {args.timeout}")
    if args.list:
        print_suites()
        return 0
    if (args.download is None) == (args.run is None):
        parser.error("give one of --download, --run or --list")
    suites = [s for s in SUITES if not args.suite or s.name in args.suite]
    if args.download is not None:
        clones = {}
        for item in args.git:
            name, sep, path = item.partition("=")
            if not sep or name not in SUITE_BY_NAME:
                parser.error(f"--git takes NAME=PATH with NAME one of {list(SUITE_BY_NAME)}, not {item!r}")
            clones[name] = git_dir(path)
        missing = [s for s in suites if s.name not in clones]
        if missing:
            print("cpu_suites: --download needs a clone of each suite's repository: "
                  + "; ".join(f"--git {s.name}=PATH (git clone https://github.com/{s.repository})" for s in missing),
                  file=sys.stderr)
            return 2
        try:
            return download(args.download, clones, suites)
        except RuntimeError as error:
            print(f"cpu_suites: {error}", file=sys.stderr)
            return 2
    absent = [s.name for s in suites if not (release_dir(args.run, s) / "site").is_dir()
              or not (release_dir(args.run, s) / "tests").is_dir()]
    if absent:
        print(f"cpu_suites: {args.run} lacks {', '.join(absent)} (run --download where there is a network)",
              file=sys.stderr)
        return 2
    args.log.parent.mkdir(parents=True, exist_ok=True)
    lines = header()
    args.log.write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
    ok = run_everything(args.run, suites, args.timeout, args.log)
    print(f"log: {args.log}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
