"""The checker as a package of its own (backward-check/pyproject.toml): it installs with pip into a folder
that holds nothing of the book, and with its dependencies into a fresh venv that lacks them; its
example test file passes there, fails with the report on a planted bug, and assert_backward keeps
to its contract."""
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import sysconfig
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


def copy_of_the_source(root):
    """The package's files alone, copied, so that no build folder lands in backward-check/."""
    source = root / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "pytest_backward_check.py"):
        shutil.copy(PACKAGE / name, source / name)
    shutil.copytree(PACKAGE / "backward_check", source / "backward_check",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return source


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """pip install --no-deps of a copy of the package's files into a folder."""
    root = tmp_path_factory.mktemp("package")
    source = copy_of_the_source(root)
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    site = root / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check",
                           *isolation, "--target", str(site), str(source)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return site


def run_pytest(site, test_file, python=sys.executable):
    """pytest on test_file in a folder of its own, with only the installed package on the path."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(test_file.parent), **({"PYTHONPATH": str(site)} if site else {})}
    return subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", test_file.name],
                          cwd=test_file.parent, capture_output=True, text=True, timeout=600, env=env)


# What the fresh venv below may see of this interpreter's packages: these, and what they require.
SHARED = ("torch", "triton", "pytest")


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


def test_the_package_holds_the_checker_alone(installed):
    assert sorted(p.name for p in installed.iterdir() if not p.name.endswith(".dist-info") and p.name != "__pycache__") \
        == ["backward_check", "pytest_backward_check.py"]
    metadata = importlib.metadata.Distribution.at(next(installed.glob("backward_check-*.dist-info")))
    assert metadata.metadata["Name"] == "backward-check"
    assert [r.split(">")[0] for r in metadata.requires if "extra" not in r] == ["torch", "numpy"]
    for path in [*(installed / "backward_check").glob("*.py"), installed / "pytest_backward_check.py"]:
        text = path.read_text()
        assert "hardened_ops" not in text.replace("hardened_ops.py", "") and "sys.path" not in text, path.name


def test_the_example_test_file_passes_with_the_installed_package(installed, tmp_path):
    copy = tmp_path / EXAMPLE.name
    shutil.copy(EXAMPLE, copy)
    done = run_pytest(installed, copy)
    assert done.returncode == 0 and "3 passed" in done.stdout, done.stdout + done.stderr


def test_the_package_installs_what_it_needs_into_a_venv_without_numpy(tmp_path):
    """pip install ./backward-check with its dependencies, into a venv that sees torch, triton and pytest (this
    interpreter's, shared through a .pth) but not numpy, which Triton's interpreter computes with: the
    example passes there. A package declaring only torch fails here as it does for a reader."""
    shared = required_closure(SHARED)
    assert "numpy" not in shared, "torch, triton or pytest requires numpy here: the venv could not lack it"
    python, site_packages = fresh_venv_sharing(tmp_path, shared)
    sees = subprocess.run([python, "-c", "import importlib.util as u, json; print(json.dumps({m: u.find_spec(m) "
                           "is not None for m in ('torch', 'triton', 'pytest', 'setuptools', 'numpy')}))"],
                          capture_output=True, text=True, check=True, env=environment_without_python_paths())
    sees = json.loads(sees.stdout)
    assert sees.pop("numpy") is False, "the fresh venv imports numpy: it cannot show that the package asks for it"
    assert all(m in sees for m in SHARED) and all(sees[m] for m in SHARED), sees

    source = copy_of_the_source(tmp_path)
    isolation = ["--no-build-isolation"] if sees["setuptools"] else []
    pip = [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check", "install",
           "--retries", "0", "--timeout", "20", *isolation, str(source)]
    # Resolve first and look: torch is a multi-GB download that pip must take as installed, never fetch.
    plan = subprocess.run([*pip, "--dry-run", "--quiet", "--report", "-"], capture_output=True, text=True,
                          env=environment_without_python_paths())
    if plan.returncode and "from versions: none" in plan.stderr:  # a machine that reaches no package index
        pytest.skip("pip finds no numpy to install here (no package index reachable): nothing to show")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    planned = {canonicalize_name(item["metadata"]["name"]) for item in json.loads(plan.stdout)["install"]}
    assert not planned & set(shared), f"pip would install again what the venv already has: {planned & set(shared)}"
    done = subprocess.run([*pip, "--quiet"], capture_output=True, text=True, env=environment_without_python_paths())
    assert done.returncode == 0, done.stdout + done.stderr
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
    op, args, kwargs, reference, options = BLIND_LEGAL["pairwise_distance_once_differentiable"]
    with pytest.warns(BackwardCheckWarning, match="not every check could decide"):
        report = assert_backward(op, *args, reference=reference, **options, **kwargs)
    assert report.clean and not report.decided
    with warnings.catch_warnings(), pytest.raises(AssertionError, match="strict=True"):
        warnings.simplefilter("error")
        assert_backward(op, *args, reference=reference, strict=True, **options, **kwargs)


def test_the_package_and_the_book_choose_the_same_backend():
    import hardened_ops
    from backward_check import DEVICE
    assert DEVICE.type == hardened_ops.DEVICE.type == ("cuda" if torch.cuda.is_available() else "cpu")
