"""
Execute a notebook top to bottom, as Jupyter would, and report its check
========================================================================

Runs a copy of the notebook in a fresh Python kernel (nbclient, ipykernel), writes the
executed copy to --output, and prints its last cell's output, which ends with
"N passed, M failed". The notebook given is never rewritten unless --output names it.

    python tools/run_notebook.py notebooks/chapter17.ipynb --output /tmp/executed.ipynb
    python tools/run_notebook.py notebooks/chapter17.ipynb --output notebooks/chapter17.ipynb
                                        # record this run's outputs in the notebook itself

Exit 0 when the notebook ran and its check reports no failure (the practice notebook: when it ran
and scored the exercises, "K of N solved"); 1 otherwise; 2 where the notebook given cannot be read as one, or
--output is a folder.
"""
import argparse
import re
import sys
import time
from pathlib import Path


def output_text(cell):
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append("".join(output["text"]) if isinstance(output["text"], list) else output["text"])
        elif output.get("output_type") == "error":
            parts.append(f"{output['ename']}: {output['evalue']}\n")
    return "".join(parts)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--output", type=Path, required=True, help="where the executed copy is written")
    parser.add_argument("--timeout", type=int, default=600, help="seconds a cell may take (default 600)")
    args = parser.parse_args(argv)
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    if args.output.is_dir():
        parser.error(f"--output {args.output}: a folder; give the executed copy's file name")
    try:
        notebook = nbformat.read(args.notebook, as_version=4)
    except (OSError, ValueError, nbformat.ValidationError) as error:  # missing, not JSON, JSON but no notebook
        first = str(error).splitlines()[0][:200] if str(error) else ""
        parser.error(f"{args.notebook}: not a notebook to run ({type(error).__name__}{': ' + first if first else ''})")
    cwd = args.output.resolve().parent  # the kernel starts beside the executed copy
    cwd.mkdir(parents=True, exist_ok=True)
    client = NotebookClient(notebook, timeout=args.timeout, kernel_name="python3", resources={"metadata": {"path": str(cwd)}})
    started = time.perf_counter()
    status = 0
    try:
        client.execute()
    except CellExecutionError as error:
        print(f"a cell failed: {' '.join(str(error).split())[:600]}", file=sys.stderr)
        status = 1
    seconds = time.perf_counter() - started
    args.output.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, args.output)
    last = output_text(notebook.cells[-1])
    print(last, end="")
    print(f"executed {args.notebook.name} in {seconds:.1f} s; written to {args.output}")
    summary = re.search(r"^(\d+) passed, (\d+) failed$", last, re.M)
    # The practice notebook scores the learner instead ("K of N solved"): any K means it ran.
    scored = re.search(r"^\d+ of \d+ solved$", last, re.M)
    if status == 0 and not scored and not (summary and summary[2] == "0" and int(summary[1]) > 0):
        print("the notebook's check did not report all passed", file=sys.stderr)
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
