"""
Real test suites under the backward-check plugin
================================================

Does `pytest --backward-check` find, with no test written for it, a bug that a library's own tests
passed? For each case below (a bug of docs/in-the-wild.md), the library's real test file, as it
was in its repository at the tag of the buggy release and at the tag of the release that fixed
the bug, runs unmodified against that release, twice: plain, and under the plugin
(backward-check/pytest_backward_check.py), which records each autograd.Function call whose input
requires grad and checks it with no reference (finite differences). The suite's own tests pass on
both releases; the plugin must name the case's trap for the case's Function in the buggy release,
and not in the fixed one.

    python tools/wild/suites.py --list          # the cases, no GPU needed
    python tools/wild/suites.py --download [DIR] --git liger=CLONE --git fla=CLONE   # network
    python3 tools/wild/suites.py --run [DIR] [--case NAME] [--jobs N] [--log PATH]   # a CUDA GPU

--download (DIR defaults to .wild-suites, which git ignores) needs the network and a local clone
of each library's repository (`git clone https://github.com/linkedin/Liger-Kernel`, and
https://github.com/fla-org/flash-linear-attention; a bare or mirror clone does too). For each
release it downloads the wheel into DIR/wheels, installs it with its pinned pure-Python needs by
`pip install --no-deps --target DIR/<dist>-<version>/site`, and extracts the test files, with the
conftest.py, test helpers and pytest configuration they use, from the release's tag into
DIR/<dist>-<version>/tests, paths kept (`git archive TAG`). DIR/<dist>-<version>/SOURCE says
which tag, commit and wheel.

--run needs no network. Each suite runs as `python -m pytest FILE -q -p no:cacheprovider` in its
tests folder, with PYTHONPATH holding only the release's site (and backward-check/, for the plugin;
any PYTHONPATH already set comes after them), a fresh Triton and inductor cache each, so the two
runs of a release compile alike. The plugin's run adds `-p pytest_backward_check
--backward-check`, the case's plugin options, and an accepted-findings file that lists only what
docs/in-the-wild.md calls by design and known. The log (default
benchmarks/results/suites_<gpu>.log) begins with tools/stamp.py's stamp, then holds each run's
command and whole output, then the table that sets the releases side by side. Timings are wall
clock, python start to exit. A case's four runs go one after another; --jobs N runs N cases at
once, which then share the GPU and time each other.

Exit status: 0 every verdict as expected; 1 a verdict not as expected (a run that timed out or
crashed included); 2 a usage error, a release not downloaded, a module the tests import missing,
or no CUDA GPU. The kernels are Triton kernels, whose interpreter is not the truth for them
(docs/in-the-wild.md, last section): --interpret runs them there anyway, for a smoke test of the
plumbing (with --select to pick a few tests), and exits 2 whatever it finds.
"""
import argparse
import concurrent.futures
import dataclasses
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "backward-check"
DEFAULT_DIR = REPO / ".wild-suites"
sys.path.insert(0, str(REPO / "tools"))
from in_the_wild import PLATFORM_PINS, table  # noqa: E402  (the wheels are pinned as there)


@dataclasses.dataclass(frozen=True)
class Suite:
    name: str                 # the case's name on docs/in-the-wild.md
    library: str              # the name --git takes for its clone (as tools/wild/<library>.py)
    repository: str           # owner/name on GitHub
    dist: str                 # the package's name on PyPI
    buggy: str
    fixed: str
    function: str             # the case's Function, as the plugin names it: module.qualname
    traps: tuple              # the case's trap: one of these the plugin must name in the buggy release, and none
                              # in the fixed one; the first is docs/in-the-wild.md's
    tests: tuple              # the test files run, as they are at each release's tag
    support: tuple            # files beside them that they need, where the tag has them
    why: str                  # why the suite reaches the bug, and why it passed
    accepted: tuple = ()      # (trap, link): by design and known on docs/in-the-wild.md, accepted for function
    plugin_options: tuple = ()
    extra_wheels: tuple = ()  # pure-Python needs, pinned, installed into each release's site
    needs: tuple = ()         # modules the tests import that are not carried: the machine must have them
    only: tuple = ()          # the tests of the files that run (all, where empty): test functions, or one of
                              # their parametrizations, as a pytest node id names them after the file

    def tag(self, version):
        return f"v{version}"


CASES = (
    Suite("liger-ce-none", "liger", "linkedin/Liger-Kernel", "liger-kernel", "0.5.8", "0.5.9",
          "liger_kernel.ops.cross_entropy.LigerCrossEntropyFunction", ("assumes a uniform grad_output",),
          tests=("test/transformers/test_cross_entropy.py",),
          support=("pyproject.toml", "test/__init__.py", "test/conftest.py", "test/utils.py"),
          why="test_correctness calls LigerCrossEntropyLoss (its Function) with logits that require grad for "
              "reduction 'sum', 'mean' and 'none', and backpropagates gradient=torch.ones_like(output): every "
              "row's grad_output is 1, so 0.5.8's grad_output[0] for every row is right there. The file's first "
              "six signatures of the Function are test_correctness's (bfloat16, then float32; 'sum', 'mean', "
              "'none' each), so --backward-check-limit 6 takes float32 'none' in; at the default 2 the plugin "
              "checks only bfloat16 'sum' and 'mean'. Only test_correctness runs (its 12 calls, every one of "
              "the six signatures): the whole file, 127 tests, took 63 s plain on an H200, and a GPU session's "
              "time does not stretch to four runs of it.",
          accepted=(("writes into an input or a saved tensor", "https://github.com/linkedin/Liger-Kernel/issues/272"),),
          plugin_options=("--backward-check-limit", "6"),
          only=("test_correctness",),
          needs=("transformers", "tokenizers")),   # test/utils.py imports both at the top; far too big to carry
    Suite("fla-swish-flat", "fla", "fla-org/flash-linear-attention", "fla-core", "0.4.1", "0.4.2",
          "fla.modules.activations.SwishFunction",
          # 17.3's non-contiguous grad_output, under either of its names: the page's where the checker can lay x
          # out like grad_output (a transposed x), the general one where it cannot: x of one row, (1, 1, 64), as
          # in test_swish's first call, made under torch.compile, if the plugin records it there
          ("assumes grad_output is laid out like its input", "assumes a contiguous grad_output"),
          tests=("tests/modules/test_activation.py",),
          support=("pyproject.toml", "tests/conftest.py"),
          why="test_swish calls swish (SwishFunction.apply) on x that requires grad and takes "
              "torch.autograd.grad(y, x, g) with g = torch.randn_like(y): contiguous, laid out like x, which is "
              "the one layout 0.4.1's flat-offset kernel reads right. The same file's test_sigmoid reaches "
              "SigmoidFunction, which had the same bug and the same fix (PR 765). Only test_swish runs, at its "
              "first three sizes: the file's other tests reach other Functions, and the whole file is slow: on an "
              "H200, with fresh caches (every kernel autotunes, and half the calls go through torch.compile, "
              "which the plugin does not record), 0.4.1's ran 13 of its 20 tests in 300 s, and a later try of "
              "test_swish alone was still at its fourth size, (3, 2048, 1200), at 90 s. The plugin's first call of SwishFunction is x "
              "of (2, 512, 128), test_swish's third, the first made without torch.compile.",
          extra_wheels=("einops==0.8.1",),       # fla-core's one requirement besides torch
          only=("test_swish[1-1-64-True]", "test_swish[2-500-128-True]", "test_swish[2-512-128-False]")),
)
CASE_BY_NAME = {c.name: c for c in CASES}

SUMMARY_HEADS = ("case", "release", "plain", "with plugin", "plain s", "plugin s", "ratio",
                 "plugin named, for the case's Function", "verdict")


def release_dir(root, case, version):
    return Path(root) / f"{case.dist}-{version}"


# ---------------------------------------------------------------------------
# --download: wheels, sites, and the test files at each tag
# ---------------------------------------------------------------------------

def git_dir(path):
    """The git directory of a clone: PATH/.git for a work tree, PATH itself for a bare or mirror clone."""
    path = Path(path).expanduser().resolve()
    return path / ".git" if (path / ".git").exists() else path


def git(gitdir, *args, binary=False):
    done = subprocess.run(["git", "--git-dir", str(gitdir), *args], capture_output=True, text=not binary)
    if done.returncode != 0:
        error = done.stderr if not binary else done.stderr.decode(errors="replace")
        raise RuntimeError(f"git {' '.join(args[:3])}: {error.strip()[-300:]}")
    return done.stdout


def has_file(gitdir, tag, path):
    return subprocess.run(["git", "--git-dir", str(gitdir), "cat-file", "-e", f"{tag}:{path}"],
                          capture_output=True).returncode == 0


def extract_tests(gitdir, case, version, target):
    """The case's test files and the support files the tag has, paths kept, into target; (commit, files)."""
    tag = case.tag(version)
    commit = git(gitdir, "rev-parse", "--verify", f"{tag}^{{commit}}").strip()
    missing = [p for p in case.tests if not has_file(gitdir, tag, p)]
    if missing:
        raise RuntimeError(f"{tag} of {case.repository} has no {', '.join(missing)}")
    files = [*case.tests, *(p for p in case.support if has_file(gitdir, tag, p))]
    archive = git(gitdir, "archive", "--format=tar", tag, "--", *files, binary=True)
    target.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(target, filter="data")
        else:  # pragma: no cover  (Python before 3.11.4)
            tar.extractall(target)
    return commit, files


def pip_download(spec, wheels):
    """The wheel of spec (NAME==VERSION) in wheels, downloaded unless there already."""
    name, _, version = spec.partition("==")
    pattern = f"{name.replace('-', '_')}-{version}-*.whl"
    found = sorted(wheels.glob(pattern))
    if not found:
        command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                   "--disable-pip-version-check", *PLATFORM_PINS, "-d", str(wheels), spec]
        done = subprocess.run(command, capture_output=True, text=True)
        found = sorted(wheels.glob(pattern))
        if done.returncode != 0 or not found:
            raise RuntimeError(f"pip could not download {spec}: {done.stderr.strip()[-300:]}")
    return found[0]


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def download(root, clones):
    root = Path(root)
    wheels = root / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    for case in CASES:
        gitdir = clones[case.library]
        for version in (case.buggy, case.fixed):
            release = release_dir(root, case, version)
            shutil.rmtree(release, ignore_errors=True)
            files = [pip_download(f"{case.dist}=={version}", wheels),
                     *(pip_download(spec, wheels) for spec in case.extra_wheels)]
            command = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                       "--disable-pip-version-check", "--target", str(release / "site"), *map(str, files)]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"pip could not install {case.dist} {version}: {done.stderr.strip()[-300:]}")
            commit, extracted = extract_tests(gitdir, case, version, release / "tests")
            (release / "SOURCE").write_text(
                f"{case.repository} {case.tag(version)} {commit}\n"
                + "".join(f"{f.name} sha256 {sha256(f)}\n" for f in files)
                + "".join(f"tests/{name}\n" for name in extracted))
            print(f"{case.name}: {case.dist} {version} from {files[0].name}; tests from {case.tag(version)} "
                  f"({commit[:12]}): {', '.join(extracted)}")
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    print(f"{len(CASES) * 2} releases in {root} ({size / 2 ** 20:.1f} MiB)")
    return 0


# ---------------------------------------------------------------------------
# --run: each suite plain and under the plugin
# ---------------------------------------------------------------------------

@dataclasses.dataclass
class Run:
    case: Suite
    role: str                 # "buggy" or "fixed"
    version: str
    plugin: bool
    command: list = None
    code: int = None          # pytest's exit status; None: timed out
    seconds: float = 0.0
    output: str = ""

    @property
    def label(self):
        return f"{self.case.name}: {self.case.dist} {self.version} ({self.role}), " + \
            ("with the plugin" if self.plugin else "plain")


def accepted_path(root, case):
    return Path(root) / f"{case.name}.accepted.json"


def write_accepted(root, case):
    """The case's accepted findings, as the plugin reads them: {op: [trap, ...]}; the file's text."""
    text = json.dumps({case.function: [trap for trap, _ in case.accepted]}, indent=2) + "\n"
    accepted_path(root, case).write_text(text)
    return text


def suite_command(case, root, plugin, select):
    targets = [f"{path}::{name}" for path in case.tests for name in case.only] or list(case.tests)
    command = [sys.executable, "-m", "pytest", *targets, "-q", "-p", "no:cacheprovider"]
    if select:
        command += ["-k", select]
    if plugin:
        command += ["-p", "pytest_backward_check", "--backward-check", *case.plugin_options]
        if case.accepted:  # one word: pytest takes a path among its arguments for one to find its rootdir by
            command += [f"--backward-check-accepted={accepted_path(root, case).resolve()}"]
    return command


def run_suite(run, root, select, interpret, timeout):
    """One suite, in its release's tests folder, in a process group of its own (the plugin's worker
    included), killed whole past timeout."""
    release = release_dir(root, run.case, run.version)
    run.command = suite_command(run.case, root, run.plugin, select)
    paths = ([str(PACKAGE)] if run.plugin else []) + [str((release / "site").resolve())]
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    with tempfile.TemporaryDirectory(prefix="suite_caches_") as caches:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), PYTHONDONTWRITEBYTECODE="1",
                   PYTHONUNBUFFERED="1", TRITON_CACHE_DIR=str(Path(caches) / "triton"),
                   TORCHINDUCTOR_CACHE_DIR=str(Path(caches) / "inductor"))
        if interpret:
            env["TRITON_INTERPRET"] = "1"
        started = time.perf_counter()
        process = subprocess.Popen(run.command, cwd=release / "tests", env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            run.output, _ = process.communicate(timeout=timeout)
            run.code = process.returncode
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            run.output, _ = process.communicate()
            run.output += f"\n(killed after {timeout} s)\n"
        run.seconds = time.perf_counter() - started
    return run


def outcome(run):
    """pytest's closing counts ('62 passed', '1 failed, 61 passed'), or what ended the run instead."""
    if run.code is None:
        return "timed out"
    for line in reversed(run.output.splitlines()):
        stripped = line.strip("= ")
        if re.search(r"\b(passed|failed|errors?|skipped|no tests ran|deselected)\b.* in [\d.]+s", stripped):
            counts = re.findall(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)", stripped)
            return ", ".join(f"{n} {word}" for n, word in counts) or stripped.split(" in ")[0]
    return f"exit {run.code}, no summary"


def plugin_findings(output, function, traps):
    """The trap names the plugin's closing table gives the op `function` (module.qualname), and that op's rows.

    The table (plugin.py's pytest_terminal_summary) follows a '=== backward-check ===' rule: an op's name on a
    line of its own, then one indented row per signature checked, ending in its verdict ('TRAP a; b (accepted)',
    'clean', 'undecided ...', 'not checked: ...'), and it ends with 'N calls of M ops checked ...'. Only the table
    is read, not the reports after it, whose evidence may use a trap's words. While that format settles, this
    reads no column: a trap counts where its exact name (backward_check.report.TRAPS) stands in a row of the op
    (an indented line under the op's name, or a line that holds the name and more), the op found by its class
    name."""
    name = function.rsplit(".", 1)[-1]
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if re.fullmatch(r"=+ backward-check =+", line.strip())), None)
    if start is None:
        return [], []
    found, rows, current = [], [], ""
    for line in lines[start + 1:]:
        if re.match(r"\d+ calls? of \d+ ops? checked", line) or re.match(r"[-=_]{3,}", line):
            break
        if line.startswith(("not recorded:", "no autograd.Function")) or line.strip().startswith("("):
            continue
        if line and not line[0].isspace():
            current = line.strip()
        if not re.search(rf"\b{re.escape(name)}\b", current):
            continue
        if line[:1].isspace() or " " in line.strip():  # a row, not the op's name alone
            rows.append(line.rstrip())
            found += [t for t in traps if t in line]
    return list(dict.fromkeys(found)), rows


def judge(run, named, rows):
    """'as expected', or why not: the buggy release's run must name the case's trap for its Function; the fixed
    release's must have checked the Function (a row not 'not checked') and not named it."""
    if run.code is None:
        return "NO: timed out"
    if run.code not in (0, 1):  # 0 every test passed, 1 some test failed; anything else: the run itself broke
        return f"NO: pytest exit {run.code}"
    case_traps = [t for t in named if t in run.case.traps]
    if run.role == "buggy":
        return "as expected" if case_traps else f"NO: {' or '.join(map(repr, run.case.traps))} not named"
    if not [r for r in rows if "not checked" not in r]:
        return f"NO: {run.case.function.rsplit('.', 1)[-1]} not checked"
    return "as expected" if not case_traps else f"NO: {', '.join(map(repr, case_traps))} named"


def header(jobs, interpret):
    import platform
    import torch
    import triton
    from stamp import lines
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (Triton interpreter)"
    return [*lines(), f"python {platform.python_version()}, torch {torch.__version__}, triton {triton.__version__}, "
            f"GPU: {gpu}", f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
            f"command: {shlex.join(['python3', 'tools/wild/suites.py', *sys.argv[1:]])}",
            f"runs: {jobs} case(s) at a time, each case's runs one after another, each run with fresh Triton and "
            f"inductor caches; times are wall clock, python start to exit"
            + ("; INTERPRETED: Triton's interpreter on the CPU, no evidence" if interpret else "")]


def shown_path(path):
    """path relative to the repository where it lies inside it (as the log shows it)."""
    path = Path(path).resolve()
    return path.relative_to(REPO) if path.is_relative_to(REPO) else path


def default_log(interpret, cases):
    """benchmarks/results/suites_<gpu>.log (h200 for an NVIDIA H200), with the cases' names where not all run."""
    import torch
    if interpret or not torch.cuda.is_available():
        label = "cpu_interpreter"
    else:
        label = re.sub(r"[^a-z0-9]+", "_", torch.cuda.get_device_name(0).lower().removeprefix("nvidia ")).strip("_")
    if len(cases) < len(CASES):
        label += "".join(f"_{c.name}" for c in cases)
    return REPO / "benchmarks" / "results" / f"suites_{label}.log"


def run_everything(root, cases, jobs, select, interpret, plain_only, timeout, log):
    """Every case's two releases, plain and under the plugin; each run written to the log as it ends, then
    the table. True if every verdict is as expected."""
    sys.path.insert(0, str(PACKAGE))
    from backward_check.report import TRAPS
    runs = [Run(case, role, version, plugin) for case in cases
            for role, version in (("buggy", case.buggy), ("fixed", case.fixed))
            for plugin in ((False,) if plain_only else (False, True))]
    lock = threading.Lock()
    with open(log, "a") as out:
        for case in cases:
            if case.accepted and not plain_only:
                out.write(f"accepted for {case.name} ({accepted_path(root, case)}), by design and known: "
                          + "; ".join(f"{trap} ({link})" for trap, link in case.accepted) + "\n"
                          + write_accepted(root, case))

    def one(run):
        run_suite(run, root, select, interpret, timeout)
        with lock:
            print(f"{run.label}: {outcome(run)} in {run.seconds:.0f} s", flush=True)
            with open(log, "a") as out:
                out.write(f"\n===== {run.label}\n"
                          f"command: {shlex.join(run.command)}\n"
                          f"in: {shown_path(release_dir(root, run.case, run.version) / 'tests')}\n"
                          f"exit: {'timed out' if run.code is None else run.code} after {run.seconds:.1f} s\n\n"
                          f"{run.output.rstrip()}\n")
        return run

    def case_runs(case):  # one case's runs one after another: its plain and plugin runs never overlap
        return [one(run) for run in runs if run.case is case]

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        done = [run for ran in pool.map(case_runs, cases) for run in ran]
    rows, ok, notes = [], True, []
    for case in cases:
        for role, version in (("buggy", case.buggy), ("fixed", case.fixed)):
            plain = next(r for r in done if r.case is case and r.version == version and not r.plugin)
            checked = next((r for r in done if r.case is case and r.version == version and r.plugin), None)
            if checked is None:
                rows.append((case.name, f"{version} {role}", outcome(plain), "-", f"{plain.seconds:.0f}", "-", "-",
                             "-", "not run (--plain-only)"))
                ok = False
                continue
            named, found_rows = plugin_findings(checked.output, case.function, TRAPS)
            verdict = judge(checked, named, found_rows)
            ok &= verdict == "as expected"
            shown = ", ".join(named) or ("no trap" if found_rows else "not called")
            rows.append((case.name, f"{version} {role}", outcome(plain), outcome(checked), f"{plain.seconds:.0f}",
                         f"{checked.seconds:.0f}", f"{checked.seconds / plain.seconds:.1f}x", shown, verdict))
            notes += [f"{case.name} {version}: {row.strip()}" for row in found_rows]
    summary = ["", table(SUMMARY_HEADS, rows), "",
               "The case's Function in each run with the plugin (its rows of the plugin's table):",
               *("  " + n for n in notes), "",
               f"{sum(r[-1] == 'as expected' for r in rows)} of {len(rows)} releases as expected"]
    print("\n".join(summary))
    with open(log, "a") as out:
        out.write("\n".join(summary) + "\n")
    return ok


def print_cases():
    for c in CASES:
        print(f"{c.name}: {c.dist} {c.buggy} (buggy, tag {c.tag(c.buggy)}) -> {c.fixed} (fixed, tag "
              f"{c.tag(c.fixed)}) of https://github.com/{c.repository} (--git {c.library}=CLONE)")
        print(f"   Function: {c.function}; trap: {' or '.join(map(repr, c.traps))}")
        print(f"   tests: {' '.join(c.tests)}{' (only ' + ', '.join(c.only) + ')' if c.only else ''}; beside them: "
              f"{', '.join(c.support)}")
        if c.plugin_options or c.accepted:
            print(f"   plugin: {' '.join(c.plugin_options) or 'defaults'}"
                  + "".join(f"; accepted: {trap} ({link})" for trap, link in c.accepted))
        if c.extra_wheels or c.needs:
            print(f"   carried: {', '.join(c.extra_wheels) or 'nothing'}; the machine must have: "
                  f"{', '.join(c.needs) or 'nothing more'}")
        print(f"   why: {c.why}")


def main(argv=None):
    parser = argparse.ArgumentParser(description="Run real libraries' own test files on their buggy and fixed "
                                                 "releases, plain and under pytest --backward-check.")
    parser.add_argument("--download", nargs="?", const=DEFAULT_DIR, type=Path, metavar="DIR",
                        help="download the releases and extract their tests into DIR (default .wild-suites)")
    parser.add_argument("--git", action="append", default=[], metavar="NAME=PATH",
                        help="a local clone of a library's repository, for --download (names: "
                             + ", ".join(sorted({c.library for c in CASES})) + ")")
    parser.add_argument("--run", nargs="?", const=DEFAULT_DIR, type=Path, metavar="DIR",
                        help="run every suite downloaded into DIR (default .wild-suites); needs a CUDA GPU")
    parser.add_argument("--list", action="store_true", help="list the cases and stop")
    parser.add_argument("--case", action="append", choices=list(CASE_BY_NAME), help="run only this case")
    parser.add_argument("--jobs", type=int, default=1, help="cases run at once, each case's runs one after "
                                                            "another (default 1; above 1 cases share the GPU and "
                                                            "their times say less)")
    parser.add_argument("--timeout", type=int, default=540, help="seconds one suite may take (default 540)")
    parser.add_argument("--log", type=Path, help="the log (default benchmarks/results/suites_<gpu>.log)")
    parser.add_argument("--interpret", action="store_true",
                        help="without a GPU, run in Triton's interpreter anyway: a smoke test, no evidence (exits 2)")
    parser.add_argument("--select", metavar="EXPR", help="pass -k EXPR to every suite (for a smoke test)")
    parser.add_argument("--plain-only", action="store_true", help="run the suites without the plugin only")
    args = parser.parse_args(argv)
    if args.list:
        print_cases()
        return 0
    if (args.download is None) == (args.run is None):
        parser.error("give one of --download, --run or --list")
    if args.jobs < 1 or args.timeout < 1:
        parser.error("--jobs and --timeout take a positive number")
    if args.download is not None:
        clones, libraries = {}, sorted({c.library for c in CASES})
        for item in args.git:
            name, sep, path = item.partition("=")
            if not sep or name not in libraries:
                parser.error(f"--git takes NAME=PATH with NAME one of {libraries}, not {item!r}")
            clones[name] = git_dir(path)
        missing = sorted(set(libraries) - set(clones))
        if missing:
            print("suites: --download needs a clone of each library: "
                  + "; ".join(f"--git {c.library}=PATH (git clone https://github.com/{c.repository})"
                              for c in {c.library: c for c in CASES if c.library in missing}.values()), file=sys.stderr)
            return 2
        try:
            return download(args.download, clones)
        except RuntimeError as error:
            print(f"suites: {error}", file=sys.stderr)
            return 2
    root = args.run
    cases = [c for c in CASES if not args.case or c.name in args.case]
    absent = [f"{c.dist} {v}" for c in cases for v in (c.buggy, c.fixed)
              if not (release_dir(root, c, v) / "site").is_dir() or not (release_dir(root, c, v) / "tests").is_dir()]
    if absent:
        print(f"suites: {root} lacks {', '.join(absent)} (run --download where there is a network)", file=sys.stderr)
        return 2
    import importlib.util
    lacking = sorted({m for c in cases for m in c.needs if importlib.util.find_spec(m) is None})
    if lacking:
        print(f"suites: the tests import {', '.join(lacking)}, which this Python lacks (pip install them)",
              file=sys.stderr)
        return 2
    import torch
    if not torch.cuda.is_available() and not args.interpret:
        print("suites: needs a CUDA GPU. These releases' kernels are Triton kernels, and Triton's interpreter is "
              "not the truth for them, so a run without a GPU would be no evidence. --interpret runs anyway (a "
              "smoke test), and still exits 2.", file=sys.stderr)
        return 2
    log = args.log or default_log(args.interpret, cases)
    log.parent.mkdir(parents=True, exist_ok=True)
    lines = header(args.jobs, args.interpret)
    log.write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
    ok = run_everything(root, cases, args.jobs, args.select, args.interpret, args.plain_only, args.timeout, log)
    print(f"log: {log}")
    if args.interpret or not torch.cuda.is_available():
        return 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
