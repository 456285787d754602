"""A repro of a trap the pytest plugin found, as opcheck's generate_repro writes one: the recorded call's arguments
saved beside a short script that loads them, seeds the generators as the check did, and checks the op again,
printing the report with each trap's evidence (how far off, on which input, under which grad_output).

    pytest --backward-check --backward-check-repro=repro      # then: python repro/mylib.ops.FusedCE-1.py

The script imports the op by its module and name, as the plugin's worker process does, so it runs from the folder
the suite runs in (or with the suite's modules on PYTHONPATH). An op no fresh process can import (one defined inside
a test, or in a __main__ script) gets no repro, and the table says why.
"""
import re
from pathlib import Path

import torch

from .recording import importable_reference

SCRIPT = '''"""backward-check found {traps} in {op}, called as {test} called it ({arguments}).

Run it from the folder the suite runs in: python {script}
It loads the call's arguments from {data}, seeds torch's, Python's and NumPy's generators as the check did, and
checks the op again; the report gives each trap's evidence. Exit status 1 while a trap is found, 0 once none is.
"""
import importlib
import sys
from pathlib import Path

import torch

from backward_check import Sample, check_backward
from backward_check.plugin.recording import resolve, restore_arguments
from backward_check.plugin.child import seed_everything

op = resolve({module!r}, {qualname!r}, {{{module!r}: importlib.import_module({module!r})}})
args, kwargs = restore_arguments(*torch.load(Path(__file__).with_name({data!r}), weights_only=False))
seed_everything({seed})
report = check_backward(op, Sample(*args, **kwargs), name={op!r}, no_grad={no_grad!r}{options})
print(report)
sys.exit(1 if report.traps else 0)
'''


def write_repro(folder, call, job, traps, test):
    """Writes folder/<op>-<n>.py and its arguments, folder/<op>-<n>.pt, for the recorded call (its Job); returns
    (the script's path, None), or (None, why there is none)."""
    reference, why = importable_reference(call.op)
    if reference is None:
        return None, f"no repro: {why}"
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stem = re.sub(r"[^A-Za-z0-9_.]+", "_", call.name)
    number = 1
    while (folder / f"{stem}-{number}.py").exists():
        number += 1
    script, data = folder / f"{stem}-{number}.py", folder / f"{stem}-{number}.pt"
    torch.save((job.args, job.kwargs), data)
    options = "".join(f", {key}={value!r}" for key, value in (("frozen_by_callers", job.frozen_by_callers),
                                                               ("made_per_call", job.made_per_call)) if value)
    module, qualname = reference
    script.write_text(SCRIPT.format(traps="; ".join(traps), op=call.name, test=test, arguments=call.described,
                                    script=script, data=data.name, module=module, qualname=qualname, seed=job.seed,
                                    no_grad=tuple(job.no_grad), options=options))
    return script, None
