"""TRITON_INTERPRET, read as Triton reads it.

Triton 3.7 switches its interpreter on for 1, true, yes, y and on, in any case. The
scripts once tested for "1" alone: on the H200, TRITON_INTERPRET=true made them pick
CUDA and say so, while Triton ran every kernel in the interpreter (1.29 s for 2**20
elements, against 0.3 ms compiled). tests/test_drift.py proves the backend choice
identical in every script, so 04's is the one loaded here.
"""
import json
import subprocess
import sys

import pytest
import triton
from chapter_scripts import ON_GPU, REPO, checker_environment

SWITCHED_ON = ["1", "true", "TRUE", "yes", "Y", "on", "On"]
SWITCHED_OFF = ["0", "false", "off", "no", "2", " 1", ""]

# Loads the script once per spelling, each time as a fresh module, and reports where its
# kernels run, what it left in the environment and what kind of kernel Triton made.
LOAD_PER_SPELLING = """
import importlib.util, json, os, sys
path, spellings = sys.argv[1], json.loads(sys.argv[2])
report = {}
for i, spelling in enumerate(spellings):
    os.environ["TRITON_INTERPRET"] = spelling
    spec = importlib.util.spec_from_file_location(f"script_{i}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    report[spelling] = [module.DEVICE.type, os.environ["TRITON_INTERPRET"], type(module.gelu_forward_kernel).__name__]
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def backend_by_spelling():
    result = subprocess.run([sys.executable, "-c", LOAD_PER_SPELLING, str(REPO / "04_standalone_complete.py"),
                             json.dumps(SWITCHED_ON + SWITCHED_OFF)],
                            capture_output=True, text=True, env=checker_environment(), timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("spelling", SWITCHED_ON)
def test_every_spelling_of_on_runs_the_interpreter_and_says_so(backend_by_spelling, spelling):
    # Written back as "1", the spelling every Triton release reads as on.
    assert backend_by_spelling[spelling] == ["cpu", "1", "InterpretedFunction"]


@pytest.mark.parametrize("spelling", SWITCHED_OFF)
def test_other_values_leave_the_choice_to_the_machine(backend_by_spelling, spelling):
    if ON_GPU:
        assert backend_by_spelling[spelling] == ["cuda", spelling, "JITFunction"]
    else:
        assert backend_by_spelling[spelling] == ["cpu", "1", "InterpretedFunction"]


@pytest.mark.skipif(not hasattr(triton, "knobs"), reason=f"Triton {triton.__version__} has no triton.knobs; "
                    "it reads TRITON_INTERPRET as on for \"1\" alone, which the scripts write back")
@pytest.mark.parametrize("spelling", SWITCHED_ON + SWITCHED_OFF)
def test_the_scripts_read_the_switch_as_this_triton_does(monkeypatch, spelling):
    monkeypatch.setenv("TRITON_INTERPRET", spelling)
    assert triton.knobs.runtime.interpret == (spelling in SWITCHED_ON)
