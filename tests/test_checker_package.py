"""The checker as a package of its own (backward-check/pyproject.toml): it installs with pip into a folder
that holds nothing of the book, leaving its source folder as it was, and with its dependencies into a fresh
venv that lacks them; its example test file passes there, fails with the report on a planted bug, and
assert_backward keeps to its contract. Its pytest plugin loads beside a checkout's copy, records on every
form torch has given Function.apply, and stops with a usage error on a torch it cannot record from."""
import importlib.metadata
import importlib.util
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "backward-check"
EXAMPLE = PACKAGE / "examples" / "test_backward.py"
sys.path.insert(0, str(PACKAGE))
from backward_check import ALL_TRAPS, UsageError  # noqa: E402
from backward_check.testing import BackwardCheckWarning, assert_backward  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checker_zoo_blind import BLIND_LEGAL  # noqa: E402
from checker_zoo_planted import PLANTED  # noqa: E402


# pyproject.toml's build backend: where this interpreter has it, pip builds with it as it is; elsewhere pip
# takes it from the package index into an environment of its own.
BUILD_ISOLATION = [] if importlib.util.find_spec("hatchling") is None else ["--no-build-isolation"]
NO_INDEX = ("from versions: none", "No matching distribution found for hatchling")


def pip_install(*args, python=None, env=None):
    """pip install args (into python's environment, where given); skips where pip reaches no package index for
    what it lacks (the build backend, or a dependency)."""
    # pip --python runs pip in that venv, which never holds the backend: there pip always fetches it
    into = ["--python", str(python)] if python else BUILD_ISOLATION
    done = subprocess.run([sys.executable, "-m", "pip", *into, "--disable-pip-version-check", "install",
                           "--retries", "0", "--timeout", "20", *args],
                          capture_output=True, text=True, env=env)
    if done.returncode and any(sign in done.stderr for sign in NO_INDEX):
        pytest.skip(f"pip reaches no package index here for what the install lacks: {done.stderr.strip()[-300:]}")
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """pip install --no-deps of the package, from the checkout's backward-check/, into a folder."""
    site = tmp_path_factory.mktemp("package") / "site"
    pip_install("-q", "--no-deps", "--target", str(site), str(PACKAGE))
    return site


def run_pytest(python_path, test_file, *options, python=sys.executable):
    """pytest on test_file in a folder of its own, with only python_path (the installed package's folder, or a
    list of folders, or None) on the path."""
    folders = [] if python_path is None else python_path if isinstance(python_path, list) else [python_path]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(test_file.parent),
           **({"PYTHONPATH": os.pathsep.join(map(str, folders))} if folders else {})}
    return subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *options, test_file.name],
                          cwd=test_file.parent, capture_output=True, text=True, timeout=600, env=env)


# What the fresh venv below may see of this interpreter's packages: these, and what they require; and setuptools
# where this interpreter has it, as a venv made by `python -m venv` before Python 3.12 has it (Triton 3.0, torch
# 2.4's, imports it without requiring it).
SHARED = ("torch", "triton", "pytest", *(["setuptools"] if importlib.util.find_spec("setuptools") else []))
# The package README's install line for torch 2.4 and 2.5 without a GPU: the interpreter of their Tritons (3.0,
# 3.1) stores nothing under NumPy 2, the NumPy pip would otherwise take.
TRITON_RELEASE = tuple(int(part) for part in importlib.metadata.version("triton").split(".")[:2])
NUMPY_FOR_THIS_TRITON = ["numpy<2"] if TRITON_RELEASE < (3, 2) and not torch.cuda.is_available() else []


def required_closure(names):
    """{name: distribution} for names and everything they require here (no extras), by their metadata."""
    found, todo = {}, list(names)
    while todo:
        name = canonicalize_name(todo.pop())
        if name not in found:
            found[name] = importlib.metadata.distribution(name)
            requirements = (Requirement(text) for text in found[name].requires or [])
            todo += [r.name for r in requirements if r.marker is None or r.marker.evaluate({"extra": ""})]
    return found


def fresh_venv_sharing(root, distributions):
    """A venv without pip whose site-packages holds one .pth: a folder of links to these distributions'
    files in this interpreter's site-packages (each top-level package or module, and its .dist-info),
    so that it imports them, and pip sees them installed, without a copy or a download."""
    shared = root / "shared"
    shared.mkdir()
    for distribution in distributions.values():
        assert distribution.files, f"{distribution.metadata['Name']} lists no files"
        for top in {path.parts[0] for path in distribution.files} - {"..", "__pycache__"}:
            if not (shared / top).exists():
                (shared / top).symlink_to(Path(distribution.locate_file(top)).resolve())
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site_packages = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                        capture_output=True, text=True, check=True).stdout.strip())
    (site_packages / "shared.pth").write_text(f"{shared}\n")
    return python, site_packages


def environment_without_python_paths():
    """This environment (PIP_INDEX_URL and the like stay) without what would put other packages in view."""
    hidden = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PIP_TARGET", "PIP_PREFIX", "PIP_USER", "PIP_NO_DEPS"}
    return {k: v for k, v in os.environ.items() if k not in hidden}


def planned_install(python, *requirements):
    """The names of the distributions `pip install requirements` would install into python's venv (a dry run)."""
    plan = pip_install("--dry-run", "--quiet", "--report", "-", *requirements, python=python,
                       env=environment_without_python_paths())
    return {canonicalize_name(item["metadata"]["name"]) for item in json.loads(plan.stdout)["install"]}


def test_the_package_holds_the_checker_alone(installed):
    """The package, its plugin's entry module, and bin/ with its one command, backward-check."""
    assert sorted(p.name for p in installed.iterdir() if not p.name.endswith(".dist-info") and p.name != "__pycache__") \
        == ["backward_check", "bin", "pytest_backward_check.py"]
    assert [p.name for p in (installed / "bin").iterdir()] == ["backward-check"]
    assert (installed / "backward_check" / "py.typed").is_file()  # its type hints are for type checkers to read
    metadata = importlib.metadata.Distribution.at(next(installed.glob("backward_check-*.dist-info")))
    assert metadata.metadata["Name"] == "backward-check"
    requirements = [Requirement(r) for r in metadata.requires]
    assert sorted(r.name for r in requirements if r.marker is None) == ["numpy", "torch"]
    # the extras the docs give: [test] what `pytest -n auto --backward-check` and the property tests need; [triton]
    # Triton, for ops with Triton kernels (the example test's), and only on Linux, where Triton publishes wheels
    tested = [r for r in requirements if r.marker and r.marker.evaluate({"extra": "test", "sys_platform": "linux"})]
    assert sorted(r.name for r in tested) == ["hypothesis", "pytest", "pytest-xdist"], metadata.requires
    triton = [r for r in requirements if r.marker and r.marker.evaluate({"extra": "triton", "sys_platform": "linux"})]
    assert [r.name for r in triton] == ["triton"], metadata.requires
    assert not [r for r in requirements if r.marker and r.marker.evaluate({"extra": "triton", "sys_platform": "darwin"})]
    plugins = [e for e in metadata.entry_points if e.group == "pytest11"]
    assert [(e.name, e.value) for e in plugins] == [("pytest_backward_check", "pytest_backward_check")]
    # Nothing of the repository's is reached through sys.path: the package never adds a folder to it. (The worker
    # takes on the suite's own sys.path, as it is at each check, so that it imports the suite's ops as the suite does.)
    modules = [p for p in (installed / "backward_check").rglob("*.py") if "tests" not in p.parts]
    assert {p.parent.name for p in modules} == {"backward_check", "checks", "plugin"}, modules
    for path in [*modules, installed / "pytest_backward_check.py"]:
        text = path.read_text()
        assert "hardened_ops" not in text.replace("hardened_ops.py", ""), path.name
        # the command line alone puts a folder first: the user's file's own, as Python does for a script it runs
        inserts = re.findall(r"^.*sys\.path\.(?:insert|append|extend).*$|^.*sys\.path \+=.*$", text, flags=re.M)
        assert [i.strip() for i in inserts] == ([] if path.name != "cli.py" else
                                                ["sys.path.insert(0, str(path.resolve().parent))"]), (path.name, inserts)
        writes = re.findall(r"^\s*sys\.path\b.*=.*$", text, flags=re.M)
        assert writes == ([] if path.name != "child.py" else ["        sys.path[:] = path"]), (path.name, writes)


def files_under(folder):
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


def test_installing_leaves_the_source_folder_as_it_was(tmp_path):
    """pip install ./backward-check builds out of the tree: no build/ or egg-info folder left beside the source
    (setuptools left both). On a copy, so that what an earlier install left in the checkout cannot hide it."""
    source = tmp_path / "backward-check"
    shutil.copytree(PACKAGE, source, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    before = files_under(source)
    pip_install("-q", "--no-deps", "--target", str(tmp_path / "site"), str(source))
    assert files_under(source) == before


SUITE_OPS = '''
import torch


class IgnoresGradOutput(torch.autograd.Function):  # the chain rule's grad_output left out
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return 2 * x
'''

SUITE = '''
import torch

from suite_ops import IgnoresGradOutput


def test_square():
    x = torch.randn(4, 5, requires_grad=True)
    IgnoresGradOutput.apply(x).backward(torch.randn(4, 5))
'''

FOUND = "TRAP ignores grad_output"


def write_suite(folder, conftest=None):
    """A test file calling a Function with a planted bug, the module of that Function beside it (the plugin's
    worker imports it by name), and a conftest.py where given; the test file's path."""
    (folder / "suite_ops.py").write_text(SUITE_OPS)
    if conftest:
        (folder / "conftest.py").write_text(textwrap.dedent(conftest))
    suite = folder / "test_suite.py"
    suite.write_text(SUITE)
    return suite


def test_the_plugin_loads_with_p_beside_the_installed_package(installed, tmp_path):
    """A checkout's command (backward-check/ on PYTHONPATH, -p pytest_backward_check) where the package is
    installed as well, as research/wild/suites.py runs it: one plugin, not "already registered under a different
    name"; and the installed package alone, through its entry point."""
    suite = write_suite(tmp_path)
    for python_path, options in (([PACKAGE, installed], ["-p", "pytest_backward_check"]), (installed, [])):
        done = run_pytest(python_path, suite, *options, "--backward-check")
        assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
        assert FOUND in done.stdout, done.stdout[-3000:]


def test_the_extras_bring_what_the_documented_commands_need(tmp_path):
    """The docs' commands, pip install "./backward-check[test]" and "./backward-check[test,triton]", in a venv
    that has torch alone (as after installing torch's CPU build): [test] brings NumPy, pytest, pytest-xdist (`-n
    auto`) and Hypothesis, and no Triton (about 1 GB, which plain-PyTorch authors never need); [test,triton] brings
    Triton too, on Linux."""
    shared = required_closure(["torch"])
    python, _ = fresh_venv_sharing(tmp_path, shared)
    planned = planned_install(python, f"{PACKAGE}[test]")
    needed = {"numpy", "pytest", "pytest-xdist", "hypothesis"}
    assert needed - set(shared) <= planned, planned
    assert "triton" not in planned, planned
    assert not planned & set(shared), f"pip would install again what the venv already has: {planned & set(shared)}"
    if sys.platform == "linux":
        with_triton = planned_install(python, f"{PACKAGE}[test,triton]")
        assert "triton" in with_triton or "triton" in shared, with_triton


def test_the_package_installs_the_backward_check_command(installed, tmp_path):
    """pip installs the console script `backward-check`: --help prints its usage, and it checks a file's Function
    (exit 1 where it finds a trap, as practice/backward_checker.py does)."""
    command = installed / "bin" / "backward-check"
    assert command.is_file(), sorted(p.name for p in (installed / "bin").iterdir())
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(installed), "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, str(command), "--help"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.startswith("usage: backward-check"), done.stdout + done.stderr
    ops = tmp_path / "my_ops.py"
    ops.write_text(SUITE_OPS)  # IgnoresGradOutput, the plugin tests' op
    done = subprocess.run([sys.executable, str(command), str(ops)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 1 and "ignores grad_output" in done.stdout, done.stdout + done.stderr



def test_the_packages_own_tests_run_from_the_installed_copy(installed, tmp_path):
    """`pytest --pyargs backward_check.tests`, as a user runs them after `pip install backward-check[test]`: they
    are collected from the installed copy, not the checkout, and pass (here a few of them, one of each kind: the
    whole set runs in make test from the checkout)."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(installed), "HOME": str(tmp_path)}
    fast = "assert_backward_raises_a_named or a_correct_op_is_clean_and_a_planted_bug_named or fail_mode_fails_the_test"
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "--pyargs",
                           "backward_check.tests", "-k", fast], cwd=tmp_path, capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    where = subprocess.run([sys.executable, "-c", "import backward_check.tests as t; print(t.__file__)"], cwd=tmp_path,
                           capture_output=True, text=True, env=env, timeout=300).stdout.strip()
    assert where == str(installed / "backward_check" / "tests" / "__init__.py"), where  # the copy, not the checkout
    ran = re.findall(r"^PASSED (\S+)", done.stdout, flags=re.M)
    assert len(ran) == 3, done.stdout[-3000:]


CPU_TORCH = "pip install torch --index-url https://download.pytorch.org/whl/cpu"


@pytest.mark.parametrize("page", ["backward-check/README.md", "docs/library-authors.md"])
def test_the_pages_name_the_test_extra_and_torchs_cpu_build(page):
    """The command the extra test above installs, and torch's CPU build first without a GPU (pip otherwise takes
    the CUDA build, GBs of nvidia packages)."""
    text = " ".join((REPO / page).read_text().split())
    assert 'pip install "./backward-check[test]"' in text and CPU_TORCH in text, page


# torch 2.14's Function.apply: _C._FunctionBase's own classmethod_descriptor, with no __func__ to call.
TORCH_2_14_APPLY = '''
    import torch

    torch.autograd.Function.apply = torch._C._FunctionBase.__dict__["apply"]
'''

# A torch whose Function.apply is a callable that binds to no class (no __get__): no hook can call it as a
# classmethod.
UNBINDABLE_APPLY = '''
    import torch


    class Unbindable:
        def __call__(self, *args, **kwargs):
            raise RuntimeError("not called as a classmethod")


    torch.autograd.Function.apply = Unbindable()
'''


def test_the_plugin_records_through_torch_2_14s_function_apply(installed, tmp_path):
    """On torch 2.14 and later Function.apply is torch's C classmethod_descriptor, and the plugin crashed pytest
    (INTERNALERROR: 'classmethod_descriptor' object has no attribute '__func__'); on any torch, this suite sets
    that form and the planted bug is named."""
    done = run_pytest(installed, write_suite(tmp_path, TORCH_2_14_APPLY), "--backward-check")
    assert "INTERNALERROR" not in done.stdout + done.stderr, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.returncode == 0 and "1 passed" in done.stdout and FOUND in done.stdout, done.stdout[-3000:]


def test_a_torch_the_plugin_cannot_record_from_stops_with_a_usage_error(installed, tmp_path):
    """Not an INTERNALERROR: pytest's usage error (exit 4), naming the torch and what to do."""
    done = run_pytest(installed, write_suite(tmp_path, UNBINDABLE_APPLY), "--backward-check")
    output = done.stdout + done.stderr
    assert done.returncode == 4 and "INTERNALERROR" not in output and "Traceback" not in output, output[-3000:]
    assert (f"ERROR: --backward-check cannot record the calls of autograd.Functions on torch {torch.__version__}: "
            f"a Function applied under the patch raised AttributeError") in done.stderr, done.stderr
    assert "Run the suite without --backward-check, or with a torch the plugin is tested on" in done.stderr


def apply_read_only_on_the_metaclass(monkeypatch, torch_apply):
    """A torch whose Function.apply is a property of the Functions' metaclass, with no setter."""
    monkeypatch.setattr(type(torch.autograd.Function), "apply", property(lambda cls: torch_apply.__get__(None, cls)),
                        raising=False)


def apply_of_each_subclass_its_own(monkeypatch, torch_apply):
    """A torch that gives each Function subclass an apply of its own as it is made: a patch on Function is in
    place, and no call of a subclass reaches it."""
    meta = type(torch.autograd.Function)
    make = meta.__init__

    def init(cls, *args, **kwargs):
        make(cls, *args, **kwargs)
        cls.apply = torch_apply

    monkeypatch.setattr(meta, "__init__", init)


@pytest.mark.parametrize("simulate, why", [
    (apply_read_only_on_the_metaclass, "patching it raised AttributeError"),
    (apply_of_each_subclass_its_own, "a Function applied under the patch never reached it"),
])
def test_a_patch_that_fails_or_records_nothing_is_a_usage_error_and_is_undone(monkeypatch, simulate, why):
    """install proves its patch on a Function of its own; where the patch fails, or no call reaches it, it says
    why and leaves torch as it found it."""
    from torch._library.custom_ops import CustomOpDef

    from backward_check.plugin.recording import Recorder
    function = torch.autograd.Function
    torch_apply, torch_call = inspect.getattr_static(function, "apply"), CustomOpDef.__dict__["__call__"]
    simulate(monkeypatch, torch_apply)
    with pytest.raises(pytest.UsageError, match=f"on torch {re.escape(torch.__version__)}: {why}"):
        Recorder(lambda call, copy: None).install()
    assert function.__dict__["apply"] is torch_apply and CustomOpDef.__dict__["__call__"] is torch_call


def test_the_usage_error_names_the_releases_the_version_matrix_runs():
    from backward_check.plugin.recording import Recorder
    spec = importlib.util.spec_from_file_location("version_matrix", REPO / "tools" / "version_matrix.py")
    matrix = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(matrix)
    minor = lambda release: ".".join(release.split(".")[:2])  # noqa: E731
    assert Recorder.TESTED_TORCH == f"{minor(matrix.RELEASES[0])} to {minor(matrix.RELEASES[-1])}"



def test_the_version_matrix_refuses_what_it_cannot_use_before_building_a_venv(tmp_path):
    """A Python that does not run, or a --results file that is missing or not its JSON lines: exit 2 with one line,
    before the minutes a venv takes (a traceback before), and the page left as it was."""
    tool = str(REPO / "tools" / "version_matrix.py")
    table = tmp_path / "table.md"
    for args, words in ((["--python", str(tmp_path / "no-python"), "--torch", "2.4.1"], "no such Python"),
                        (["--render", "--results", str(tmp_path / "absent.jsonl")], "no such file"),
                        (["--render", "--results", str(REPO / "README.md")], "not the JSON lines")):
        done = subprocess.run([sys.executable, tool, *args, "--table", str(table)], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 2 and words in done.stderr, done.stderr[-2000:]
        assert "Traceback" not in done.stderr and not table.exists()

def test_the_example_test_file_passes_with_the_installed_package(installed, tmp_path):
    copy = tmp_path / EXAMPLE.name
    shutil.copy(EXAMPLE, copy)
    done = run_pytest(installed, copy)
    assert done.returncode == 0 and "3 passed" in done.stdout, done.stdout + done.stderr


def test_the_package_installs_what_it_needs_into_a_venv_without_numpy(tmp_path):
    """pip install ./backward-check with its dependencies, into a venv that sees torch, triton and pytest (this
    interpreter's, shared through a .pth; setuptools too, where it is here) but not numpy, which Triton's interpreter computes with: the
    example passes there. A package declaring only torch fails here as it does for a reader."""
    shared = required_closure(SHARED)
    assert "numpy" not in shared, "torch, triton or pytest requires numpy here: the venv could not lack it"
    python, site_packages = fresh_venv_sharing(tmp_path, shared)
    sees = subprocess.run([python, "-c", "import importlib.util as u, json; print(json.dumps({m: u.find_spec(m) "
                           f"is not None for m in {(*SHARED, 'numpy')!r}}}))"],
                          capture_output=True, text=True, check=True, env=environment_without_python_paths())
    sees = json.loads(sees.stdout)
    assert sees.pop("numpy") is False, "the fresh venv imports numpy: it cannot show that the package asks for it"
    assert all(m in sees for m in SHARED) and all(sees[m] for m in SHARED), sees

    # Resolve first and look: torch is a multi-GB download that pip must take as installed, never fetch.
    requirements = [str(PACKAGE), *NUMPY_FOR_THIS_TRITON]
    planned = planned_install(python, *requirements)
    assert not planned & set(shared), f"pip would install again what the venv already has: {planned & set(shared)}"
    pip_install("--quiet", *requirements, python=python, env=environment_without_python_paths())
    installed_here = sorted(p.name.split("-")[0] for p in site_packages.glob("*.dist-info"))
    assert installed_here == sorted(canonicalize_name(n).replace("-", "_") for n in planned), installed_here

    copy = tmp_path / "example" / EXAMPLE.name
    copy.parent.mkdir()
    shutil.copy(EXAMPLE, copy)
    ran = run_pytest(None, copy, python=python)
    assert ran.returncode == 0 and "3 passed" in ran.stdout, ran.stdout[-4000:] + ran.stderr[-2000:]


def test_the_example_fails_with_the_report_when_its_backward_has_a_trap(installed, tmp_path):
    """The same file with the grad_output's .contiguous() taken out: after .sum() its strides are 0."""
    text = EXAMPLE.read_text()
    fixed_line = "        grad_output = grad_output.contiguous()  # after .sum() its strides are all 0\n"
    assert fixed_line in text
    copy = tmp_path / EXAMPLE.name
    copy.write_text(text.replace(fixed_line, ""))
    done = run_pytest(installed, copy)
    assert done.returncode == 1 and "3 failed" in done.stdout, done.stdout + done.stderr
    assert "TRAP  assumes a contiguous grad_output" in done.stdout and "input `a`" in done.stdout, done.stdout


def test_a_trap_fails_the_assertion_with_the_whole_report():
    op, args, kwargs, reference, trap = PLANTED["input y ignores grad_output"]
    with pytest.raises(AssertionError, match="has 1 trap \\(ignores grad_output\\)") as raised:
        assert_backward(op, *args, reference=reference, **kwargs)
    assert f"TRAP  {trap}" in str(raised.value) and "check_backward(" in str(raised.value)


def test_an_allowed_trap_passes_and_is_still_reported():
    op, args, kwargs, reference, trap = PLANTED["input y ignores grad_output"]
    report = assert_backward(op, *args, reference=reference, allow=trap, **kwargs)
    assert report.traps == [trap]


def test_allow_names_only_traps_the_checker_knows():
    op, args, kwargs, reference, _ = PLANTED["input y ignores grad_output"]
    with pytest.raises(UsageError, match="allow names no trap the checker knows: 'ignores grad output' "
                                         "\\(did you mean 'ignores grad_output'\\?\\)"):
        assert_backward(op, *args, reference=reference, allow=["ignores grad output"], **kwargs)


def test_allow_takes_none_and_trap_objects():
    op, args, kwargs, reference, trap = PLANTED["input y ignores grad_output"]
    with pytest.raises(AssertionError, match="has 1 trap"):
        assert_backward(op, *args, reference=reference, allow=None, **kwargs)
    trap_object = next(t for t in ALL_TRAPS if t.name == trap)
    assert assert_backward(op, *args, reference=reference, allow=[trap_object], **kwargs).traps == [trap]


def test_a_usage_error_is_one_line_of_the_callers_not_the_checkers_frames():
    op, args, kwargs, reference, _ = PLANTED["input y ignores grad_output"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch warns that a Function is not instantiated
        instance = op()
    with pytest.raises(UsageError, match="not an instance of it") as raised:
        assert_backward(instance, *args, reference=reference, **kwargs)
    assert raised.value.__suppress_context__ and raised.value.__cause__ is None
    with pytest.raises(UsageError, match="cannot take these arguments"):
        assert_backward(op, *args, 1, 2, 3, reference=reference)


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU, triton imported first finds the GPU")
def test_triton_imported_first_is_a_usage_error_not_the_ops_crash(installed, tmp_path):
    """The example with `import triton` moved above the package's import, on a machine without a GPU."""
    text = EXAMPLE.read_text()
    first = "from backward_check.testing import assert_backward\n"
    assert first in text
    copy = tmp_path / EXAMPLE.name
    copy.write_text("import triton  # first, as a library's conftest might\n" + text)
    done = run_pytest(installed, copy)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "triton was imported before the checker chose its backend" in done.stdout, done.stdout
    assert "TRAP  crashes" not in done.stdout, done.stdout


def test_an_allowed_trap_that_is_gone_is_said():
    op, args, kwargs, reference, _ = PLANTED["input y ignores grad_output"]
    fixed = [v.detach().clone() for v in args]
    with pytest.warns(BackwardCheckWarning, match="allowed but not found"):
        assert_backward(lambda x, y: x * y, *fixed, reference=reference, allow="mutates grad_output in place")


def test_an_undecided_check_warns_and_fails_only_when_strict():
    """create_graph=True with no reference: the op's gradient carries a graph, and nothing says whether it is the
    right one. (Undecided on every torch: a reference without a double backward of its own, such as torch.cdist
    until torch 2.14, decides once a release gives it one.)"""
    op, args, kwargs, _, options = BLIND_LEGAL["x_sin_x_second_order"]
    with pytest.warns(BackwardCheckWarning, match="not every check could decide"):
        report = assert_backward(op, *args, **options, **kwargs)
    assert report.clean and not report.decided
    with warnings.catch_warnings(), pytest.raises(AssertionError, match="strict=True"):
        warnings.simplefilter("error")
        assert_backward(op, *args, strict=True, **options, **kwargs)


def test_the_package_and_the_book_choose_the_same_backend():
    import hardened_ops
    from backward_check import DEVICE
    assert DEVICE.type == hardened_ops.DEVICE.type == ("cuda" if torch.cuda.is_available() else "cpu")
