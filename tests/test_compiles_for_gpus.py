"""The kernels compile for every GPU generation a reader may have, on any machine.

04_standalone_complete.py carries all five kernels, and tests/test_drift.py proves
the other scripts' copies identical, so 04's are the ones compiled. Each target is
its own test; the compiles run in two processes, NVIDIA and AMD, side by side.
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import triton
from chapter_scripts import REPO, TRITON_RELEASE

NVIDIA_TARGETS = {  # target: (example GPUs, the oldest Triton that knows it)
    "sm_60": ("P100 (Kaggle)", (3, 7)),
    "sm_70": ("V100", (3, 7)),
    "sm_75": ("T4, RTX 20xx (the free Colab GPU)", (3, 0)),
    "sm_80": ("A100", (3, 0)),
    "sm_86": ("RTX 30xx, A10", (3, 0)),
    "sm_89": ("RTX 40xx, L4", (3, 0)),
    "sm_90": ("H100, H200", (3, 0)),
    "sm_100": ("B200", (3, 3)),
    "sm_120": ("RTX 50xx (triton-lang/triton#5950)", (3, 3)),
}
AMD_TARGETS = {
    "gfx90a": ("MI210, MI250", (3, 0)),
    "gfx942": ("MI300", (3, 0)),
    "gfx1100": ("RX 7900", (3, 0)),
}
# Older than the GPUs Triton is developed and tested on: compiled here with the pinned
# Triton 3.7.1, and run on no such GPU. Older Tritons were not tried.
ONLY_COMPILED_WITH = {"sm_60": (3, 7), "sm_70": (3, 7)}
DTYPES = ("fp16", "bf16", "fp32", "fp64")
# (target, dtype) pairs an older Triton cannot compile: (the oldest Triton that can, why).
DTYPE_LIMITS = {
    ("sm_75", "bf16"): ((3, 3), "Triton 3.0 to 3.2 emit bf16 instructions that ptxas refuses below sm_80 "
                                "(\"Feature '.bf16' requires .target sm_80 or higher\"); Triton 3.3 compiles them. "
                                "The chapter's fp32 scripts are unaffected"),
}


def dtypes_for(target):
    return tuple(d for d in DTYPES if TRITON_RELEASE >= DTYPE_LIMITS.get((target, d), ((0, 0), ""))[0])


def amd_linker_missing():
    """Triton 3.4 and older (measured: 3.0 to 3.4) link AMD code with ROCm's ld.lld rather than
    in-process; the reason to skip where that is missing, or None if this Triton can link."""
    from triton._C.libtriton import amd
    if hasattr(amd, "link_hsaco"):
        return None
    candidates = [os.environ.get("TRITON_HIP_LLD_PATH", ""), "/opt/rocm/llvm/bin/ld.lld", shutil.which("ld.lld") or ""]
    if any(c and Path(c).is_file() for c in candidates):
        return None
    return f"Triton {triton.__version__} links AMD code with ROCm's ld.lld, which is not installed here"


def compile_targets(targets, path="hardened_ops.py", dtypes_of=None):
    """One process for all `targets` that compile the same dtypes (each group its own process)."""
    groups = {}
    for target in targets:
        groups.setdefault((dtypes_of or dtypes_for)(target), []).append(target)
    return [subprocess.Popen([sys.executable, str(REPO / "tests/compile_for_targets.py"), "--dtypes", ",".join(dtypes),
                              str(REPO / path), *group],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for dtypes, group in groups.items()]


def supported(targets):
    return [t for t, (_, oldest) in targets.items() if TRITON_RELEASE >= oldest]


def report_of(runs):
    lines, errors = {}, []
    for run in runs:
        stdout, stderr = run.communicate(timeout=900)
        errors.append(stderr)
        for line in stdout.splitlines():
            target, _, result = line.partition(": ")
            lines[target] = result
    return lines, "\n".join(errors)


@pytest.fixture(scope="module")
def compile_report():
    """{target: its line} for every target this Triton knows: hardened_ops.py's kernels in every dtype."""
    runs = compile_targets(supported(NVIDIA_TARGETS))
    if amd_linker_missing() is None:
        runs += compile_targets(supported(AMD_TARGETS))
    return report_of(runs)


@pytest.fixture(scope="module")
def book_compile_report():
    """The book's own kernels (04, as the reader runs it) in the book's float32, for every NVIDIA target."""
    return report_of(compile_targets(supported(NVIDIA_TARGETS), "04_standalone_complete.py", lambda _: ("fp32",)))


def compiled_dtypes(line):
    """The dtypes of a "compiled 5 kernels (...) in fp16, bf16, n: i32" line; none from a FAILED line,
    which names the dtype it failed on."""
    match = re.fullmatch(r"compiled 5 kernels \(.*\) in (.*), n: \S+", line)
    return set(match[1].split(", ")) if match else set()


def test_a_failed_compile_yields_no_dtypes():
    assert compiled_dtypes("FAILED gelu_forward_kernel with bf16 pointers and n: i32: CompilationError: ...") == set()
    assert compiled_dtypes("compiled 5 kernels (a, b, c, d, e) in fp16, bf16, n: i32/i64") == {"fp16", "bf16"}


def target_params(targets):
    return [pytest.param(target, oldest, id=f"{target} ({gpus})") for target, (gpus, oldest) in targets.items()]


@pytest.mark.parametrize("target, oldest", target_params(NVIDIA_TARGETS) + target_params(AMD_TARGETS))
def test_kernels_compile_for(compile_report, target, oldest):
    if target in ONLY_COMPILED_WITH and TRITON_RELEASE < ONLY_COMPILED_WITH[target]:
        pytest.skip(f"{target} was compiled with Triton 3.7.1 only (and run on no such GPU); an "
                    f"older release is not assumed to build it")
    if TRITON_RELEASE < oldest:
        pytest.skip(f"Triton {triton.__version__} predates {target} (Triton 3.2's ptxas: \"Value '{target}' is not "
                    f"defined for option 'gpu-name'\"); it needs Triton {'.'.join(map(str, oldest))} or newer")
    if target in AMD_TARGETS and amd_linker_missing():
        pytest.skip(amd_linker_missing())
    lines, stderr = compile_report
    assert target in lines, f"no result for {target}:\n{stderr}"
    assert set(dtypes_for(target)) <= compiled_dtypes(lines[target]), f"{target}: {lines[target]}"


@pytest.mark.parametrize("target, dtype", list(DTYPE_LIMITS), ids=lambda v: v)
def test_dtype_that_older_tritons_cannot_compile(compile_report, target, dtype):
    oldest, why = DTYPE_LIMITS[(target, dtype)]
    if TRITON_RELEASE < oldest:
        pytest.skip(f"Triton {triton.__version__}: {why}")
    lines, stderr = compile_report
    assert dtype in compiled_dtypes(lines.get(target, "")), f"{target}: {lines.get(target)}\n{stderr}"


@pytest.mark.parametrize("target, oldest", target_params(NVIDIA_TARGETS))
def test_the_books_kernels_compile_in_float32_for(book_compile_report, target, oldest):
    if TRITON_RELEASE < max(oldest, ONLY_COMPILED_WITH.get(target, (0, 0))):
        pytest.skip(f"{target} is not compiled with Triton {triton.__version__} (see test_kernels_compile_for)")
    lines, stderr = book_compile_report
    assert "fp32" in compiled_dtypes(lines.get(target, "")), f"{target}: {lines.get(target)}\n{stderr}"
