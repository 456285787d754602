"""
Real test suites under the backward-check plugin
================================================

Does `pytest --backward-check`, with its default options, find a bug that a library's own tests passed,
with no test written for it? For each case below (a bug of docs/in-the-wild.md), the library's real test
file, whole and unmodified, as it was in its repository at the tag of the buggy release and at the tag of
the release that fixed the bug, runs against that release, plain and under the plugin
(backward-check/pytest_backward_check.py), which records each autograd.Function call whose input requires
grad and checks it with no reference (finite differences). The plugin must name the case's trap for each
of the case's Functions in the buggy release, and must check them and not name it in the fixed one.

    python research/wild/suites.py --list          # the cases, no GPU needed
    python research/wild/suites.py --download [DIR] --git liger=CLONE --git fla=CLONE --git flash_attn=CLONE
    python3 research/wild/suites.py --run [DIR] [--case NAME] [--jobs N] [--timeout S] [--log PATH]   # a CUDA GPU
    python3 research/wild/suites.py --run --case liger-ce-none --workers 8   # the plain and plugin runs under -n 8

--download (DIR defaults to .wild-suites, which git ignores) needs the network and a local clone of each
library's repository (`git clone https://github.com/linkedin/Liger-Kernel`, ...; a bare or mirror clone
does too). For each release it downloads the wheel into DIR/wheels and installs it, with its pinned
pure-Python needs, by `pip install --no-deps --target DIR/<dist>-<version>/site`; a release with a compiled
extension is loaded as research/wild/common.py's VENDORED says (its Triton op files alone, from its sdist).
It extracts the test files, with the conftest.py and pytest configuration they use, from the release's
tag into DIR/<dist>-<version>/tests, paths kept (`git archive TAG`); DIR/<dist>-<version>/SOURCE says
which tag, commit and files. It ends with what DIR weighs.

--run needs no network. Each release's suite runs three times, one after another, in its tests folder,
with PYTHONPATH holding only the release's site (and backward-check/, for the plugin; any PYTHONPATH
already set comes after them), and a Triton and inductor cache of the release's own:

  1. the warm-up: `python -m pytest FILE -q --tb=short -p no:cacheprovider -n W` (pytest-xdist, W =
     --warm-workers), untimed, which fills the cache: the kernels compile, and autotune for every shape, once;
  2. plain: `python -m pytest FILE -q --tb=short -p no:cacheprovider`, timed (short tracebacks: a release
     whose own tests fail by the thousand keeps a log that can be read);
  3. with the plugin: the same with `-p pytest_backward_check --backward-check` and nothing else but an
     accepted-findings file that lists only what docs/in-the-wild.md calls by design and known; timed.

Plain and plugin runs find the same warm cache, so neither compiles the suite's own kernels; the plugin's
run compiles, and autotunes, whatever its checks call that the suite did not (other dtypes and layouts),
which a fresh cache would have hidden inside the suite's own compile time. A release's three runs share
--timeout seconds: the warm-up may take a third, then the plain and the plugin's run each get half of what
it left, the same deadline for both. A run past its deadline is interrupted as Ctrl-C would (SIGINT):
pytest then prints its counts and the plugin its table of what it checked so far, and the verdict is on
the tests that ran; a run still alive INTERRUPT_GRACE seconds later is killed with its process group. The
ratio is shown only where all three runs ended by themselves (an interrupted warm-up would leave the plain
run compiling what the plugin's run then finds compiled).

With --compile the plugin's run adds --backward-check-compile (docs/library-authors.md): its verdict is judged
as before, and its table also says what torch.compile changed. With --workers N the plain and plugin runs go under pytest-xdist (-n N), as a library's CI often runs them: each
worker checks the calls it records, and the controller prints one table, so the verdict is judged as before.

The log (default benchmarks/results/suites_<gpu>.log, suites_<gpu>_xdist<N>.log with --workers) begins with tools/stamp.py's stamp and how the runs
were made, then holds each run's command and whole output, then the table that sets the releases side by
side. Timings are wall clock, python start to exit. --jobs N runs N releases at once, which then share
the GPU and the CPU and time each other.

Exit status: 0 every verdict as expected; 1 a verdict not as expected (a run killed or crashed included);
2 a usage error, a release not downloaded, a module the tests import missing, or no CUDA GPU. The kernels
are Triton kernels, whose interpreter is not the truth for them (docs/in-the-wild.md, last section):
--interpret runs them there anyway, for a smoke test of the plumbing (with --select to pick a few tests),
and exits 2 whatever it finds.
"""
import argparse
import concurrent.futures
import contextlib
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
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "backward-check"
DEFAULT_DIR = REPO / ".wild-suites"
sys.path[:0] = [str(REPO / "research"), str(REPO / "tools")]
from in_the_wild import PLATFORM_PINS, fetch_vendored, install_vendored, table, vendored_archive  # noqa: E402
from wild.flash_attn import LAYER_NORM  # noqa: E402  (the files case 16 vendors)

INTERRUPT_GRACE = 30      # seconds an interrupted suite has to print its counts and the plugin's table (the plugin
                          # waits up to 10 s for its worker to stop)
WARM_UP, PLAIN, PLUGIN = "warm-up", "plain", "with the plugin"


@dataclasses.dataclass(frozen=True)
class Suite:
    name: str                 # the case's name on docs/in-the-wild.md
    library: str              # the name --git takes for its clone (as research/wild/<library>.py)
    repository: str           # owner/name on GitHub
    dist: str                 # the package's name on PyPI
    buggy: str
    fixed: str
    functions: tuple          # the case's Functions, as the plugin names them: module.qualname
    traps: tuple              # the case's trap: the plugin must name one of these for each Function in the buggy
                              # release, and none in the fixed one; the first is docs/in-the-wild.md's
    tests: tuple              # the test files run, whole, as they are at each release's tag
    support: tuple            # files beside them that they need, where the tag has them
    why: str                  # why the suite reaches the bug, and why it passed
    accepted: tuple = ()      # (function, trap, link): by design and known on docs/in-the-wild.md
    extra_wheels: tuple = ()  # pure-Python needs, pinned, installed into each release's site
    needs: tuple = ()         # modules the tests import that are not carried: the machine must have them
    vendored: tuple = ()      # for a release with a compiled extension: its Triton op files alone (common.VENDORED)

    def tag(self, version):
        return f"v{version}"


CASES = (
    Suite("liger-ce-none", "liger", "linkedin/Liger-Kernel", "liger-kernel", "0.5.8", "0.5.9",
          ("liger_kernel.ops.cross_entropy.LigerCrossEntropyFunction",), ("assumes a uniform grad_output",),
          tests=("test/transformers/test_cross_entropy.py",),
          support=("pyproject.toml", "test/__init__.py", "test/conftest.py", "test/utils.py"),
          why="Its 127 tests call LigerCrossEntropyFunction (through LigerCrossEntropyLoss or liger_cross_entropy) "
              "on logits that require grad, and backpropagate a scalar loss or gradient=torch.ones_like(output): "
              "every row's grad_output is the same, so 0.5.8's grad_output[0] for every row is right there. "
              "Every call with reduction='none' is one where a grad_output that differs by row shows it.",
          accepted=(("liger_kernel.ops.cross_entropy.LigerCrossEntropyFunction", "writes into an input or a saved tensor",
                     "https://github.com/linkedin/Liger-Kernel/issues/272"),),
          needs=("transformers", "tokenizers")),   # test/utils.py imports both at the top; far too big to carry
    Suite("liger-flce-none", "liger", "linkedin/Liger-Kernel", "liger-kernel", "0.8.1", "0.8.2",
          ("liger_kernel.ops.fused_linear_cross_entropy.LigerFusedLinearCrossEntropyFunction",),
          ("assumes a uniform grad_output",),
          tests=("test/transformers/test_fused_linear_cross_entropy.py",),
          support=("pyproject.toml", "test/__init__.py", "test/conftest.py", "test/utils.py",
                   "test/transformers/test_cross_entropy.py"),
          why="An expensive op, and a revealing call that comes late. The file's first 300-odd tests call "
              "LigerFusedLinearCrossEntropyFunction (a linear layer and cross entropy in one Function, up to "
              "8 x 128 rows of 1,024 features against 4,096 classes) with reduction='mean' or 'sum', where "
              "grad_output is one number. Its reduction='none' calls come after them, in the token-scaling tests, "
              "on 8 rows, and backpropagate loss.sum(): every row's grad_output is 1, so 0.8.1's backward, which "
              "scales every row's gradient by grad_output[0], is right there. Those calls pass "
              "use_token_scaling=True, whose gradient holds each row's scale (its target's predicted probability) "
              "constant by design, so against finite differences both releases are off on them for any grad_output; "
              "the checker names 0.8.1's bug there by comparing the op with itself (its gradient under a random "
              "grad_output is its own answer for grad_output[0] everywhere), and 0.8.2's by-design difference 'a "
              "wrong formula' (research/wild/liger_token_scaling.py decides both against the test's detached-scale "
              "reference).",
          needs=("transformers", "tokenizers")),   # as liger-ce-none: test/utils.py imports both
    Suite("fla-swish-flat", "fla", "fla-org/flash-linear-attention", "fla-core", "0.4.1", "0.4.2",
          ("fla.modules.activations.SwishFunction", "fla.modules.activations.SigmoidFunction"),
          # 17.3's non-contiguous grad_output, under either of its names: the page's where the checker can lay x
          # out like grad_output (a transposed x), the general one where it cannot
          ("assumes grad_output is laid out like its input", "assumes a contiguous grad_output"),
          tests=("tests/modules/test_activation.py",),
          support=("pyproject.toml", "tests/conftest.py"),
          why="test_swish calls swish (SwishFunction.apply) and test_sigmoid calls sigmoid (SigmoidFunction.apply), "
              "each on x that requires grad, and take torch.autograd.grad(y, x, g) with g = torch.randn_like(y): "
              "contiguous, laid out like x, which is the one layout 0.4.1's flat-offset kernels read right. Both "
              "Functions had the bug, and PR 765 (0.4.2) fixed both. Half of each test's calls go through "
              "torch.compile, which the plugin does not record; the others are eager. The file's 20 tests "
              "autotune every kernel for each last dimension and dtype (30 configs each), which is most of "
              "their time on a fresh cache.",
          extra_wheels=("einops==0.8.1",)),       # fla-core's one requirement besides torch
    Suite("fla-conv-dy-strides", "fla", "fla-org/flash-linear-attention", "fla-core", "0.5.0", "0.5.1",
          ("fla.modules.conv.triton.ops.CausalConv1dFunction",),
          ("assumes a contiguous grad_output", "assumes grad_output is laid out like its input"),
          tests=("tests/modules/test_conv.py",),
          support=("pyproject.toml", "tests/conftest.py"),
          why="A convolution along the sequence, the short convolution before a linear-attention scan. test_conv "
              "and its neighbours call causal_conv1d (CausalConv1dFunction.apply) on x, weight and bias that "
              "require grad, and backpropagate dy = torch.randn(B, T, D): contiguous, which is the one layout "
              "0.5.0's backward kernel, reading dy with hard-coded strides (D, 1), reads right. The cuda-backend "
              "tests skip where the causal-conv1d package is missing, as on the machines here.",
          extra_wheels=("einops==0.8.1",)),      # fla-core's one requirement besides torch, and the test file's
    Suite("flash-attn-ln-early-exit", "flash_attn", "Dao-AILab/flash-attention", "flash-attn", "2.4.3.post1", "2.5.0",
          ("flash_attn.ops.triton.layer_norm.LayerNormFn",),
          # uninitialised rows of the weight gradient's buffer: they differ between two calls (the page's trap) or
          # hold the same in both (then the weight's gradient is off whatever the grad_output)
          ("keeps state between calls", "a wrong formula"),
          tests=("tests/ops/triton/test_layer_norm.py",),
          support=("tests/pyproject.toml",),
          why="test_layer_norm calls layer_norm_fn (LayerNormFn.apply) on x, weight and bias that require grad, "
              "with 8 x 512 = 4096 rows, and backpropagates a random grad_output. The backward launches one "
              "program per SM, each with ceil(4096 / SMs) rows: on a GPU of 108 SMs every program owns rows; "
              "on one of 132 (an H100 or H200) programs 128 to 131 own none and, in 2.4.3.post1, skip writing "
              "their row of the weight gradient's buffer, so the suite's own test may catch the bug there. "
              "The file is 9,728 tests (7,200 run, 2,400 skipped, 128 of test_layer_norm_linear), each shape "
              "and flag compiling and autotuning its kernels: it does not end within a GPU session's minutes, "
              "and runs until the deadline.",
          extra_wheels=("einops==0.8.1",),       # the test file imports einops
          vendored=LAYER_NORM),
)
CASE_BY_NAME = {c.name: c for c in CASES}

SUMMARY_HEADS = ("case", "release", "warm-up", "plain", "with plugin", "plain s", "plugin s", "ratio",
                 "plugin named, for the case's Functions", "verdict")


def release_dir(root, case, version):
    return Path(root) / f"{case.dist}-{version}"


def short_name(function):
    return function.rsplit(".", 1)[-1]


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


def release_files(case, version, wheels):
    """What the release is installed from: its wheel, or the archive of its vendored files (fetched from its
    sdist where not there already); then its pure-Python needs' wheels."""
    if case.vendored:
        archive = vendored_archive(wheels, case.dist, version)
        if not archive.exists():
            fetch_vendored(wheels, case.dist, version, case.vendored)
        first = archive
    else:
        first = pip_download(f"{case.dist}=={version}", wheels)
    return [first, *(pip_download(spec, wheels) for spec in case.extra_wheels)]


def install_release(case, files, site):
    """The release into site: its vendored files (with empty package __init__.py files), or its wheel, and its
    needs' wheels, by pip without dependencies or byte-compiling."""
    wheels = files
    if case.vendored:
        site.mkdir(parents=True)
        install_vendored(files[0], site, ())
        wheels = files[1:]
    if not wheels:
        return
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
               "--disable-pip-version-check", "--target", str(site), *map(str, wheels)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"pip could not install {case.dist}: {done.stderr.strip()[-300:]}")
    shutil.rmtree(site / "bin", ignore_errors=True)   # console scripts: no test runs them


def vendored_origin(archive):
    """The sdist (or wheel) a vendored archive's files came from, and its sha256, as the archive records it."""
    with zipfile.ZipFile(archive) as opened:
        return opened.read("SOURCE").decode().strip()


def weight(root):
    """Bytes of the files under root."""
    return sum(p.stat().st_size for p in Path(root).rglob("*") if p.is_file())


def download(root, clones, cases=CASES):
    root = Path(root)
    wheels = root / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    for case in cases:
        gitdir = clones[case.library]
        for version in (case.buggy, case.fixed):
            release = release_dir(root, case, version)
            shutil.rmtree(release, ignore_errors=True)
            files = release_files(case, version, wheels)
            install_release(case, files, release / "site")
            commit, extracted = extract_tests(gitdir, case, version, release / "tests")
            (release / "SOURCE").write_text(
                f"{case.repository} {case.tag(version)} {commit}\n"
                + "".join(f"{f.name} sha256 {sha256(f)}\n" for f in files)
                + (f"  its files: {', '.join(case.vendored)}, from {vendored_origin(files[0])}\n" if case.vendored else "")
                + "".join(f"tests/{name}\n" for name in extracted))
            print(f"{case.name}: {case.dist} {version} from {files[0].name}; tests from {case.tag(version)} "
                  f"({commit[:12]}): {', '.join(extracted)}")
    releases = sum(weight(release_dir(root, c, v)) for c in cases for v in (c.buggy, c.fixed))
    print(f"{len(cases) * 2} releases in {root}: {releases / 2 ** 20:.1f} MiB, and {weight(wheels) / 2 ** 20:.1f} MiB "
          f"of downloads in {wheels} (--run reads only the releases' folders)")
    return 0


# ---------------------------------------------------------------------------
# --run: each release's suite warmed up, then plain and under the plugin
# ---------------------------------------------------------------------------

@dataclasses.dataclass
class Run:
    case: Suite
    role: str                 # "buggy" or "fixed"
    version: str
    plugin: bool
    warm_up: bool = False     # the untimed run that fills the release's caches (plain, under pytest-xdist)
    command: list = None
    code: int = None          # pytest's exit status; None: killed
    seconds: float = 0.0
    output: str = ""
    interrupted: bool = False  # stopped at the deadline (SIGINT); its counts are of the tests that ran

    @property
    def stage(self):
        return WARM_UP if self.warm_up else PLUGIN if self.plugin else PLAIN

    @property
    def label(self):
        return f"{self.case.name}: {self.case.dist} {self.version} ({self.role}), {self.stage}"


def accepted_path(root, case):
    return Path(root) / f"{case.name}.accepted.json"


def write_accepted(root, case):
    """The case's accepted findings, as the plugin reads them: {op: [trap, ...]}; the file's text."""
    by_op = {}
    for function, trap, _ in case.accepted:
        by_op.setdefault(function, []).append(trap)
    text = json.dumps(by_op, indent=2) + "\n"
    accepted_path(root, case).write_text(text)
    return text


def suite_command(case, root, plugin, select, workers=0, compile_check=False):
    """The suite's whole files, with pytest-xdist's -n where workers (a warm-up's, or --workers' for the timed runs),
    or the plugin with its defaults."""
    command = [sys.executable, "-m", "pytest", *case.tests, "-q", "--tb=short", "-p", "no:cacheprovider"]
    if select:
        command += ["-k", select]
    if workers:
        command += ["-n", str(workers)]
    if plugin:
        command += ["-p", "pytest_backward_check", "--backward-check"]
        if compile_check:
            command.append("--backward-check-compile")
        if case.accepted:  # one word: pytest takes a path among its arguments for one to find its rootdir by
            command.append(f"--backward-check-accepted={accepted_path(root, case).resolve()}")
    return command


def suite_environment(release, plugin, caches, interpret):
    paths = ([str(PACKAGE)] if plugin else []) + [str((release / "site").resolve())]
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1",
               TRITON_CACHE_DIR=str(Path(caches) / "triton"), TORCHINDUCTOR_CACHE_DIR=str(Path(caches) / "inductor"),
               COLUMNS="200")  # the plugin's table in its wide layout, one row a line, as the logs show it
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    return env


def stop(process, timeout):
    """Wait for the suite up to timeout seconds; past it, interrupt it as Ctrl-C would, and kill its process
    group (the plugin's worker and pytest-xdist's included) if it has not ended INTERRUPT_GRACE seconds later.
    (output, interrupted, killed)."""
    try:
        return process.communicate(timeout=timeout)[0], False, False
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGINT)
    try:
        output, killed = process.communicate(timeout=INTERRUPT_GRACE)[0], False
    except subprocess.TimeoutExpired:
        output, killed = "", True
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # what the interrupt left running
    if killed:
        output = process.communicate()[0] + f"\n(killed {INTERRUPT_GRACE} s after the interrupt)\n"
    return output + f"\n(interrupted at the {timeout} s deadline)\n", True, killed


def run_suite(run, root, select, interpret, timeout, caches=None, warm_workers=0, workers=0, compile_check=False):
    """One suite, in its release's tests folder, in a process group of its own; caches: the folder of the
    release's Triton and inductor caches (None: fresh ones, removed after)."""
    if caches is None:
        with tempfile.TemporaryDirectory(prefix="suite_caches_") as fresh:
            return run_suite(run, root, select, interpret, timeout, fresh, warm_workers, workers, compile_check)
    release = release_dir(root, run.case, run.version)
    run.command = suite_command(run.case, root, run.plugin, select, warm_workers if run.warm_up else workers,
                                compile_check)
    env = suite_environment(release, run.plugin, caches, interpret)
    started = time.perf_counter()
    process = subprocess.Popen(run.command, cwd=release / "tests", env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    run.output, run.interrupted, killed = stop(process, timeout)
    run.code = None if killed else process.returncode
    run.seconds = time.perf_counter() - started
    return run


def counts(run):
    """pytest's closing counts ('62 passed', '1 failed, 61 passed'), or None where it printed none."""
    for line in reversed(run.output.splitlines()):
        stripped = line.strip("= ")
        if re.search(r"\b(passed|failed|errors?|skipped|no tests ran|deselected)\b.* in [\d.]+s", stripped):
            found = re.findall(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)", stripped)
            return ", ".join(f"{n} {word}" for n, word in found) or stripped.split(" in ")[0]
    return None


def outcome(run):
    """pytest's closing counts, marked where the deadline interrupted it, or what ended the run instead."""
    if run.code is None:
        return "killed at the deadline"
    said = counts(run)
    if said is None:
        return f"exit {run.code}, no summary"
    return f"{said} (interrupted)" if run.interrupted else said


def warm_up_deadline(budget):
    """A release's runs share its budget (seconds): its warm-up may take a third."""
    return max(1, budget // 3)


def timed_deadline(budget, warm_seconds):
    """Its plain and plugin runs then get the same deadline, half of what the warm-up left each: the two timed runs
    are held alike."""
    return max(1, int((budget - warm_seconds) // 2))


def ended_by_itself(run):
    return run is not None and run.code is not None and not run.interrupted


def ratio(warm, plain, checked):
    """The plugin's run over the plain one, where the warm-up, the plain and the plugin's runs all ended by
    themselves (an interrupted warm-up would leave the plain run compiling what the plugin's then finds)."""
    if not all(ended_by_itself(r) for r in (warm, plain, checked)) or plain.seconds <= 0:
        return "-"
    return f"{checked.seconds / plain.seconds:.1f}x"


# ---------------------------------------------------------------------------
# Reading the plugin's table
# ---------------------------------------------------------------------------

SEPARATOR = re.compile(r"([=_-])\1*( .* \1+)?")          # pytest's rules: '=====', '--- title ---', '- title -'
OP_NAME = re.compile(r"([A-Za-z_]\w*(?:\.\w+)+|\w+::\w+(?:\.\w+)?)(?=\s|$)")   # module.qualname, or ns::op
NOT_A_CHECK = ("not checked", "left out")


def plugin_table(output):
    """The lines of the plugin's closing table: after its '=== backward-check ===' rule, up to the next pytest
    rule (the per-signature reports' '- op (...) -' headers, or pytest's closing counts). [] if absent."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if re.fullmatch(r"=+ backward-check =+", line.strip())), None)
    if start is None:
        return []
    table_lines = []
    for line in lines[start + 1:]:
        if SEPARATOR.fullmatch(line.rstrip()):
            break
        table_lines.append(line)
    return table_lines


def op_blocks(table_lines):
    """{op name: its lines}: an op's name starts a line of its own, and the indented lines under it (its rows,
    and rows wrapped onto further lines) are its own; any other unindented line ends the block."""
    blocks, current = {}, None
    for line in table_lines:
        if not line.strip():
            continue
        if not line[0].isspace():
            named = OP_NAME.match(line)
            current = named.group(1) if named else None
            if current is not None:
                blocks.setdefault(current, [])
        elif current is not None:
            blocks[current].append(line.rstrip())
    return blocks


def without_notes(text):
    """text with its parenthesized notes taken out, innermost first ('(accepted)', '(accepted but not found, so
    ...: a trap)', '(3 more signatures not checked: ...)'): a trap named inside one is not a finding."""
    while True:
        shorter = re.sub(r"\([^()]*\)", " ", text)
        if shorter == text:
            return text
        text = shorter


def plugin_findings(output, function, traps):
    """(the trap names the plugin's closing table gives the op `function` (module.qualname), that op's rows).

    Only the table is read, not the reports after it, whose evidence may use a trap's words, and no column:
    the op is found by its class name (the last part of its qualname), its rows are the indented lines under
    it, and a trap counts where its exact name (backward_check.report.TRAPS) stands in them, outside a
    parenthesized note, with the rows joined and their whitespace collapsed (so a row wrapped onto the next
    line reads as one)."""
    wanted = short_name(function)
    rows = [row for op, lines in op_blocks(plugin_table(output)).items() if short_name(op) == wanted for row in lines]
    text = " ".join(without_notes(" ".join(rows)).split())
    return [t for t in traps if t in text], rows


def was_checked(rows):
    """Whether a row of the op is a check made (a verdict), not a note or signatures left unchecked."""
    lines = [" ".join(row.split()) for row in rows]
    return any(line and not line.startswith("(") and not any(word in line for word in NOT_A_CHECK) for line in lines)


def judge(run, findings):
    """'as expected', or why not. findings: {function: (named, rows)} for each of the case's Functions. The buggy
    release's run must name the case's trap for each; the fixed release's must have checked each (a row that is a
    verdict) and named it for none. A run the deadline interrupted is judged on the tests that ran."""
    if run.code is None:
        return "NO: killed"
    if run.code not in (0, 1) and not run.interrupted:  # 0 passed, 1 some test failed; else the run itself broke
        return f"NO: pytest exit {run.code}"
    problems = []
    for function in run.case.functions:
        named, rows = findings[function]
        case_traps = [t for t in named if t in run.case.traps]
        if run.role == "buggy" and not case_traps:
            problems.append(f"{' or '.join(map(repr, run.case.traps))} not named for {short_name(function)}"
                            + ("" if rows else " (not checked)"))
        elif run.role == "fixed" and not was_checked(rows):
            problems.append(f"{short_name(function)} not checked")
        elif run.role == "fixed" and case_traps:
            problems.append(f"{', '.join(map(repr, case_traps))} named for {short_name(function)}")
    return "NO: " + "; ".join(problems) if problems else "as expected"


def shown_findings(case, findings):
    """For the table: each Function's trap names, or 'no trap', 'not checked' (only noted), or 'not in the table'
    (not called, or, in a run the deadline interrupted, its check not finished: the plugin lists checks made)."""
    def one(function):
        named, rows = findings[function]
        return ", ".join(named) or ("no trap" if was_checked(rows) else "not checked" if rows else "not in the table")
    if len(case.functions) == 1:
        return one(case.functions[0])
    return "; ".join(f"{short_name(f)}: {one(f)}" for f in case.functions)


# ---------------------------------------------------------------------------
# The log and the table
# ---------------------------------------------------------------------------

def header(jobs, budget, warm_workers, interpret, workers=0, compile_check=False):
    import platform
    import torch
    import triton
    from stamp import lines
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (Triton interpreter)"
    warm = (f"a warm-up run of the suite (plain, pytest -n {warm_workers}, untimed) fills a Triton and inductor "
            f"cache of the release's own" if warm_workers else
            "a warm-up run of the suite (plain, one process, untimed) fills a Triton and inductor cache of the "
            "release's own")
    return [*lines(), f"python {platform.python_version()}, torch {torch.__version__}, triton {triton.__version__}, "
            f"GPU: {gpu}", f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
            f"command: {shlex.join(['python3', 'research/wild/suites.py', *sys.argv[1:]])}",
            f"runs: whole test files, the plugin with its default options; {jobs} release(s) at a time, each "
            f"release's runs one after another: {warm}, then its plain and plugin runs are timed on that cache (the "
            f"plugin's run compiles only what its checks call anew); the three share {budget} s, the warm-up up to "
            f"{warm_up_deadline(budget)} s, the plain and plugin runs each half of what it left; a run past its "
            f"deadline is interrupted (SIGINT, as Ctrl-C) and judged on the tests that ran; the ratio is given only "
            f"where all three runs ended by themselves; times are wall clock, python start to exit"
            + (f"; the plain and plugin runs under pytest-xdist (-n {workers}): each worker checks what it records, "
               f"and the controller prints one table" if workers else "")
            + ("; the plugin's run with --backward-check-compile (each op also checked under torch.compile)"
               if compile_check else "")
            + ("; INTERPRETED: Triton's interpreter on the CPU, no evidence" if interpret else "")]


def shown_path(path):
    """path relative to the repository where it lies inside it (as the log shows it)."""
    path = Path(path).resolve()
    return path.relative_to(REPO) if path.is_relative_to(REPO) else path


def default_log(interpret, cases, workers=0, compile_check=False):
    """benchmarks/results/suites_<gpu>.log (h200 for an NVIDIA H200), with the cases' names where not all run."""
    import torch
    if interpret or not torch.cuda.is_available():
        label = "cpu_interpreter"
    else:
        label = re.sub(r"[^a-z0-9]+", "_", torch.cuda.get_device_name(0).lower().removeprefix("nvidia ")).strip("_")
    if len(cases) < len(CASES):
        label += "".join(f"_{c.name}" for c in cases)
    if workers:
        label += f"_xdist{workers}"
    if compile_check:
        label += "_compile"
    return REPO / "benchmarks" / "results" / f"suites_{label}.log"


def summary_row(case, role, version, runs, traps):
    """(the table's row, the case's Functions' rows of the plugin's table, the verdict) for one release."""
    def find(stage):
        return next((r for r in runs if r.case is case and r.version == version and r.stage == stage), None)
    warm, plain, checked = find(WARM_UP), find(PLAIN), find(PLUGIN)
    shown_warm = f"{outcome(warm)}, {warm.seconds:.0f} s"
    if checked is None:
        verdict = "not run (--plain-only)"
        return ((case.name, f"{version} {role}", shown_warm, outcome(plain), "-", f"{plain.seconds:.0f}", "-", "-",
                 "-", verdict), [], verdict)
    findings = {f: plugin_findings(checked.output, f, traps) for f in case.functions}
    verdict = judge(checked, findings)
    notes = [f"{case.name} {version}: {short_name(f)}: {' '.join(row.split())}"
             for f in case.functions for row in findings[f][1]]
    row = (case.name, f"{version} {role}", shown_warm, outcome(plain), outcome(checked), f"{plain.seconds:.0f}",
           f"{checked.seconds:.0f}", ratio(warm, plain, checked), shown_findings(case, findings), verdict)
    return row, notes, verdict


def run_everything(root, cases, jobs, select, interpret, plain_only, budget, warm_workers, log, workers=0,
                   compile_check=False):
    """Every case's two releases: warm-up, plain, and under the plugin; each run written to the log as it ends,
    then the table. True if every verdict is as expected."""
    sys.path.insert(0, str(PACKAGE))
    from backward_check.report import TRAPS
    releases = [(case, role, version) for case in cases for role, version in (("buggy", case.buggy),
                                                                              ("fixed", case.fixed))]
    lock = threading.Lock()
    with open(log, "a") as out:
        for case in cases:
            if case.accepted and not plain_only:
                out.write(f"accepted for {case.name} ({shown_path(accepted_path(root, case))}), by design and known: "
                          + "; ".join(f"{short_name(f)}: {trap} ({link})" for f, trap, link in case.accepted) + "\n"
                          + write_accepted(root, case))

    def one(run, caches, timeout):
        run_suite(run, root, select, interpret, timeout, caches, warm_workers, workers, compile_check)
        with lock:
            print(f"{run.label}: {outcome(run)} in {run.seconds:.0f} s", flush=True)
            with open(log, "a") as out:
                out.write(f"\n===== {run.label}\n"
                          f"command: {shlex.join(run.command)}\n"
                          f"in: {shown_path(release_dir(root, run.case, run.version) / 'tests')}\n"
                          f"exit: {'killed' if run.code is None else run.code}"
                          f"{' (interrupted at the deadline)' if run.interrupted else ''} after {run.seconds:.1f} s\n\n"
                          f"{run.output.rstrip()}\n")
        return run

    def release_runs(release):  # one release's runs one after another, on one cache: they never overlap
        case, role, version = release
        with tempfile.TemporaryDirectory(prefix=f"suite_caches_{case.dist}-{version}_") as caches:
            warm = one(Run(case, role, version, False, warm_up=True), caches, warm_up_deadline(budget))
            each = timed_deadline(budget, warm.seconds)
            return [warm, *(one(Run(case, role, version, plugin), caches, each)
                            for plugin in ((False,) if plain_only else (False, True)))]

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        done = [run for ran in pool.map(release_runs, releases) for run in ran]
    rows, notes, verdicts = [], [], []
    for case, role, version in releases:
        row, found, verdict = summary_row(case, role, version, done, TRAPS)
        rows.append(row)
        notes += found
        verdicts.append(verdict)
    summary = ["", table(SUMMARY_HEADS, rows), "",
               "The case's Functions in each run with the plugin (their rows of the plugin's table):",
               *("  " + n for n in notes), "",
               f"{verdicts.count('as expected')} of {len(rows)} releases as expected"]
    print("\n".join(summary))
    with open(log, "a") as out:
        out.write("\n".join(summary) + "\n")
    return all(v == "as expected" for v in verdicts)


def print_cases():
    for c in CASES:
        print(f"{c.name}: {c.dist} {c.buggy} (buggy, tag {c.tag(c.buggy)}) -> {c.fixed} (fixed, tag "
              f"{c.tag(c.fixed)}) of https://github.com/{c.repository} (--git {c.library}=CLONE)")
        print(f"   Functions: {', '.join(c.functions)}; trap: {' or '.join(map(repr, c.traps))}")
        print(f"   tests, whole: {' '.join(c.tests)}; beside them: {', '.join(c.support)}")
        if c.vendored:
            print(f"   loaded: only {', '.join(c.vendored)} (vendored from the sdist; see research/wild/common.py)")
        if c.accepted:
            print("   accepted: " + "; ".join(f"{short_name(f)}: {trap} ({link})" for f, trap, link in c.accepted))
        if c.extra_wheels or c.needs:
            print(f"   carried: {', '.join(c.extra_wheels) or 'nothing'}; the machine must have: "
                  f"{', '.join(c.needs) or 'nothing more'}")
        print(f"   why: {c.why}")


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"takes a positive number, not {text}")
    return value


def not_negative(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"takes 0 or a positive number, not {text}")
    return value


def main(argv=None):
    parser = argparse.ArgumentParser(description="Run real libraries' own test files, whole, on their buggy and "
                                                 "fixed releases, plain and under pytest --backward-check.")
    parser.add_argument("--download", nargs="?", const=DEFAULT_DIR, type=Path, metavar="DIR",
                        help="download the releases and extract their tests into DIR (default .wild-suites)")
    parser.add_argument("--git", action="append", default=[], metavar="NAME=PATH",
                        help="a local clone of a library's repository, for --download (names: "
                             + ", ".join(sorted({c.library for c in CASES})) + ")")
    parser.add_argument("--run", nargs="?", const=DEFAULT_DIR, type=Path, metavar="DIR",
                        help="run every suite downloaded into DIR (default .wild-suites); needs a CUDA GPU")
    parser.add_argument("--list", action="store_true", help="list the cases and stop")
    parser.add_argument("--case", action="append", choices=list(CASE_BY_NAME), help="only this case")
    parser.add_argument("--jobs", type=positive, default=1,
                        help="releases run at once, each release's runs one after another (default 1; above 1 "
                             "releases share the GPU and the CPU, and their times say less)")
    parser.add_argument("--timeout", type=positive, default=540, metavar="S",
                        help="seconds a release's three runs may take in all (default 540): the warm-up up to a "
                             "third, the plain and plugin runs each up to half of what it left")
    parser.add_argument("--warm-workers", type=not_negative, default=4, metavar="W",
                        help="pytest-xdist workers of each release's warm-up run (default 4; 0: one process)")
    parser.add_argument("--workers", type=not_negative, default=0, metavar="N",
                        help="run the timed plain and plugin runs under pytest-xdist with -n N (default 0: one "
                             "process, as the ratio is measured)")
    parser.add_argument("--compile", action="store_true", dest="compile_check",
                        help="the plugin's run with --backward-check-compile: each op also checked under "
                             "torch.compile against itself eagerly")
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
    cases = [c for c in CASES if not args.case or c.name in args.case]
    if args.download is not None:
        clones, libraries = {}, sorted({c.library for c in cases})
        for item in args.git:
            name, sep, path = item.partition("=")
            if not sep or name not in {c.library for c in CASES}:
                parser.error(f"--git takes NAME=PATH with NAME one of {sorted({c.library for c in CASES})}, "
                             f"not {item!r}")
            clones[name] = git_dir(path)
        missing = sorted(set(libraries) - set(clones))
        if missing:
            print("suites: --download needs a clone of each library: "
                  + "; ".join(f"--git {c.library}=PATH (git clone https://github.com/{c.repository})"
                              for c in {c.library: c for c in cases if c.library in missing}.values()), file=sys.stderr)
            return 2
        try:
            return download(args.download, clones, cases)
        except (RuntimeError, OSError) as error:
            print(f"suites: {error}", file=sys.stderr)
            return 2
    root = args.run
    absent = [f"{c.dist} {v}" for c in cases for v in (c.buggy, c.fixed)
              if not (release_dir(root, c, v) / "site").is_dir() or not (release_dir(root, c, v) / "tests").is_dir()]
    if absent:
        print(f"suites: {root} lacks {', '.join(absent)} (run --download where there is a network)", file=sys.stderr)
        return 2
    import importlib.util
    lacking = sorted({m for c in cases for m in c.needs if importlib.util.find_spec(m) is None})
    if (args.warm_workers or args.workers) and importlib.util.find_spec("xdist") is None:
        lacking.append("xdist (pytest-xdist, for the warm-up's -n; or pass --warm-workers 0)")
    if lacking:
        print(f"suites: the runs need {', '.join(lacking)}, which this Python lacks (pip install them)",
              file=sys.stderr)
        return 2
    import torch
    if not torch.cuda.is_available() and not args.interpret:
        print("suites: needs a CUDA GPU. These releases' kernels are Triton kernels, and Triton's interpreter is "
              "not the truth for them, so a run without a GPU would be no evidence. --interpret runs anyway (a "
              "smoke test), and still exits 2.", file=sys.stderr)
        return 2
    log = args.log or default_log(args.interpret, cases, args.workers, args.compile_check)
    log.parent.mkdir(parents=True, exist_ok=True)
    lines = header(args.jobs, args.timeout, args.warm_workers, args.interpret, args.workers, args.compile_check)
    log.write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
    ok = run_everything(root, cases, args.jobs, args.select, args.interpret, args.plain_only, args.timeout,
                        args.warm_workers, log, args.workers, args.compile_check)
    print(f"log: {log}")
    if args.interpret or not torch.cuda.is_available():
        return 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
