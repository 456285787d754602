"""Every script's kernels compile for an H100/H200 (sm_90) in every float dtype, GPU or not."""
import subprocess
import sys

import pytest
from chapter_scripts import REPO, SCRIPT_NAMES


@pytest.mark.parametrize("script", SCRIPT_NAMES)
def test_kernels_compile_for_sm90(script):
    result = subprocess.run([sys.executable, str(REPO / "tests/compile_for_hopper.py"), str(REPO / f"{script}.py")],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "gelu_forward_kernel: compiled" in result.stdout
