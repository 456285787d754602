"""The checker as a package of its own (practice/pyproject.toml): it installs with pip into a folder
that holds nothing of the book, its example test file passes there, fails with the report on a
planted bug, and assert_backward keeps to its contract."""
import importlib.metadata
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
PRACTICE = REPO / "practice"
EXAMPLE = PRACTICE / "examples" / "test_backward.py"
sys.path.insert(0, str(PRACTICE))
from backward_check import ALL_TRAPS, UsageError  # noqa: E402
from backward_check.testing import BackwardCheckWarning, assert_backward  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checker_zoo_blind import BLIND_LEGAL  # noqa: E402
from checker_zoo_planted import PLANTED  # noqa: E402


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """pip install of a copy of the package's files (so no build folder lands in practice/) into a folder."""
    root = tmp_path_factory.mktemp("package")
    source = root / "source"
    source.mkdir()
    for name in ("pyproject.toml", "PACKAGE.md"):
        shutil.copy(PRACTICE / name, source / name)
    shutil.copytree(PRACTICE / "backward_check", source / "backward_check",
                    ignore=shutil.ignore_patterns("__pycache__"))
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    site = root / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check",
                           *isolation, "--target", str(site), str(source)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return site


def run_pytest(site, test_file):
    """pytest on test_file in a folder of its own, with only the installed package on the path."""
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test_file.name],
                          cwd=test_file.parent, capture_output=True, text=True, timeout=600,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site), "HOME": str(test_file.parent)})


def test_the_package_holds_the_checker_alone(installed):
    assert sorted(p.name for p in installed.iterdir() if not p.name.endswith(".dist-info")) == ["backward_check"]
    metadata = importlib.metadata.Distribution.at(next(installed.glob("backward_check-*.dist-info")))
    assert metadata.metadata["Name"] == "backward-check"
    assert [r.split(">")[0] for r in metadata.requires if "extra" not in r] == ["torch"]
    for path in (installed / "backward_check").glob("*.py"):
        text = path.read_text()
        assert "hardened_ops" not in text.replace("hardened_ops.py", "") and "sys.path" not in text, path.name


def test_the_example_test_file_passes_with_the_installed_package(installed, tmp_path):
    copy = tmp_path / EXAMPLE.name
    shutil.copy(EXAMPLE, copy)
    done = run_pytest(installed, copy)
    assert done.returncode == 0 and "3 passed" in done.stdout, done.stdout + done.stderr


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
