"""
Which Triton releases the lean launch recognises
================================================

hardened_ops.py launches a cached compiled kernel directly only where Triton's own
JITFunction.run launches it with exactly hardened_ops.LAUNCH_STATEMENT; elsewhere it takes
the ordinary kernel[grid](...). This reads JITFunction.run from Triton wheels (and from the
installed Triton) and says, for each, which of the two paths hardened_ops.py would take.

    python -m pip download --no-deps --only-binary=:all: triton==3.5.1 -d wheels/
    python tools/lean_launch_releases.py wheels/*.whl

It needs no GPU: it only reads the source. Exit status: 0; 2 for an argument that is not a Triton wheel on disk
(a glob that matched nothing stays as written), or -h/--help, which prints this.
"""
import ast
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import hardened_ops  # noqa: E402


def run_source(jit_py):
    """The source of JITFunction.run in a triton/runtime/jit.py."""
    tree = ast.parse(jit_py)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "JITFunction":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "run":
                    return ast.get_source_segment(jit_py, item)
    return ""


def verdict(source):
    return "lean launch" if hardened_ops.recognises_launch(source) else "ordinary kernel[grid](...) launch"


def main(wheels):
    import inspect

    import triton
    print(f"installed triton {triton.__version__}: {verdict(inspect.getsource(triton.runtime.jit.JITFunction.run))}")
    for wheel in sorted(wheels, key=lambda p: [int(x) for x in Path(p).name.split("-")[1].split(".")[:3]]):
        with zipfile.ZipFile(wheel) as archive:
            source = run_source(archive.read("triton/runtime/jit.py").decode())
        print(f"{Path(wheel).name.split('-')[1]:>8}: {verdict(source) if source else 'JITFunction.run not found'}")


def wheel_problem(path):
    """Why path is not a Triton wheel to read ('' where it is one)."""
    name = Path(path).name
    if not Path(path).is_file():
        return "no such file (did the download run? a glob that matches nothing stays as written)"
    if not name.startswith("triton-") or not name.endswith(".whl"):
        return "not a Triton wheel (triton-VERSION-...whl)"
    if not all(part.isdigit() for part in name.split("-")[1].split(".")[:3]):
        return "no release number in its name"
    return ""


if __name__ == "__main__":
    if {"-h", "--help"} & set(sys.argv[1:]):
        print(__doc__.strip())
        sys.exit(0)
    refused = [f"{path}: {why}" for path in sys.argv[1:] if (why := wheel_problem(path))]
    if refused:
        print("lean_launch_releases.py: " + "; ".join(refused), file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1:])
