"""Each script's inline metadata (PEP 723, read by `uv run SCRIPT.py`) pins what requirements.txt pins.

`uv run 04_standalone_complete.py` installs from the block at the top of the file;
`make check` installs from requirements.txt. The two must not drift apart.
"""
import re

import pytest
from chapter_scripts import EXTRAS_NAMES, REPO, SCRIPT_NAMES
from packaging.requirements import Requirement

BLOCK = re.compile(r"^# /// script\n((?:#.*\n)*?)# ///$", re.M)


def inline_requirements(script):
    text = (REPO / f"{script}.py").read_text()
    blocks = BLOCK.findall(text)
    assert len(blocks) == 1, f"{script}.py: expected one '# /// script' block, found {len(blocks)}"
    toml = "\n".join(line.removeprefix("#").removeprefix(" ") for line in blocks[0].splitlines())
    dependencies = re.search(r"dependencies = \[(.*?)\]", toml, re.S)[1]
    return {str(Requirement(item)) for item in re.findall(r'"([^"]+)"', dependencies)}


def requirements_txt():
    """The pins of requirements.txt (the reader's) and requirements-dev.txt (the extras' matplotlib)."""
    lines = [line.split("#")[0].strip() for name in ("requirements.txt", "requirements-dev.txt")
             for line in (REPO / name).read_text().splitlines()]
    return {str(Requirement(line)) for line in lines if line and not line.startswith("-r")}


@pytest.mark.parametrize("script", SCRIPT_NAMES + EXTRAS_NAMES)
def test_inline_pins_match_requirements_txt(script):
    inline = inline_requirements(script)
    assert {r for r in inline if Requirement(r).name in {"torch", "triton", "triton-windows", "numpy"}} == \
        {r for r in requirements_txt() if Requirement(r).name in {"torch", "triton", "triton-windows", "numpy"}}, (
        f"{script}.py's inline metadata pins torch, triton or numpy differently from requirements.txt")
    assert inline <= requirements_txt(), f"{script}.py asks for {sorted(inline - requirements_txt())}, not in requirements.txt"


def test_the_uv_run_check_refuses_an_argument_or_a_missing_uv_before_downloading(tmp_path):
    """tools/uv_run_check.sh takes no arguments: one (--bogus) is refused with exit 2, where it used to start the
    multi-GB download; a uv that does not run is named before it, where it used to show the expected output's diff
    twice, as if the output were wrong."""
    import os
    import subprocess
    script = str(REPO / "tools" / "uv_run_check.sh")
    refused = subprocess.run([script, "--bogus"], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "takes no arguments" in refused.stderr, refused.stderr
    no_uv = subprocess.run([script], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "UV": str(tmp_path / "no-uv")})
    assert no_uv.returncode == 2 and "no uv runs as" in no_uv.stderr and "---" not in no_uv.stdout, no_uv.stderr
    helped = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and helped.stdout.startswith("uv_run_check.sh:") and "set -" not in helped.stdout
