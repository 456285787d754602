"""
The chapter's traps in real libraries
=====================================

Each case is a bug that a real library shipped, of a trap the chapter teaches, with the release
that had it and the release that fixed it. For each release this installs the wheel into a
folder of its own (or, for a library with a compiled extension or a heavy import, copies only its
Triton op files there: research/wild/common.py's VENDORED), imports it in a subprocess of its own
(two versions never meet), and runs three tools on the library's real autograd.Function, called
with its real arguments:

  * the repository's backward checker (practice/backward_checker.py) with a torch reference;
  * torch.autograd.gradcheck, in float64 (and, where the kernels compute in fp32 anyway, also
    in float32 with loose tolerances, since float64 finite differences then only measure rounding);
  * torch.library.opcheck, where the op is a registered custom op.

It prints one table and exits 0 only if every buggy release is flagged with its case's trap and
every fixed release is clean (a trap present in both releases, with an open issue, is listed
with the case as known and shown, not counted). --sweep also runs the checker over each
library's current release: its public Functions, each against a torch reference whose agreement
with the Function's own forward is printed beside it, and each flag provoked again by a probe of
the library's module that does not use the checker. The libraries are research/wild/<name>.py.

    python research/in_the_wild.py --download          # fetch the releases into .wild-wheels/ (network)
    python research/in_the_wild.py [--case NAME] [--library NAME] [--wheels DIR]   # with a CUDA GPU
    python research/in_the_wild.py --sweep --jobs 8 --pin-autotune
    python research/in_the_wild.py --sweep-only --compile    # also check each Function under torch.compile
    python research/in_the_wild.py --list              # the cases, no GPU needed

Exit status: 0 every release as expected (and every sweep ran); 1 a release not as expected, or a
sweep that could not run; 2 a usage error, a missing wheel, or no CUDA GPU. The kernels are Triton
kernels, and Triton's interpreter is not the truth for them (one release behaved differently
there), so without a GPU the verdicts would be no evidence: --interpret runs them anyway, marks
them so, and exits 2.
"""
import argparse
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "research"), str(REPO / "tools")]
from wild import common  # noqa: E402
from wild.common import positional  # noqa: E402  (the tests bind arguments with it too)

DEFAULT_WHEELS = REPO / ".wild-wheels"
PLATFORM_PINS = ["--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux_2_28_x86_64",
                 "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64"]
LIBRARIES = ("liger", "fla", "unsloth", "flash_attn", "mamba", "cce")  # research/wild/<name>.py, in the page's order
RESULT_MARK = "@@RESULT "
PIN_VARIABLE = "IN_THE_WILD_PIN_AUTOTUNE"
COMPILE_VARIABLE = "BACKWARD_CHECK_COMPILE"  # backward_check.compile_backend.ENVIRONMENT: --compile, for the children


def library(name):
    import importlib
    return importlib.import_module(f"wild.{name}")


MODULES = {name: library(name) for name in LIBRARIES}
CASES = tuple(case for module in MODULES.values() for case in module.CASES)
CASE_MODULE = {case.name: module for module in MODULES.values() for case in module.CASES}
SWEEPS = {module.SWEEP.dist: module for module in MODULES.values() if hasattr(module, "SWEEP")}


def extra_wheels(dist):
    """Pure-Python needs of a library's releases (installed only where missing)."""
    for module in MODULES.values():
        if any(c.dist == dist for c in module.CASES) or getattr(module, "SWEEP", None) and module.SWEEP.dist == dist:
            return list(getattr(module, "EXTRA_WHEELS", []))
    return []


# ---------------------------------------------------------------------------
# The three tools, in the child
# ---------------------------------------------------------------------------

def load_checker():
    sys.path.insert(0, str(REPO / "practice"))
    from backward_checker import check_backward
    return check_backward


def run_checker(check_backward, fn, args, kwargs, reference, name):
    """The checker's verdict on the real Function called with its real args and kwargs."""
    from backward_check.compile_backend import backend_from_environment
    started = time.perf_counter()
    try:
        report = check_backward(fn, *args, reference=reference, name=name, compile=backend_from_environment(),
                                **kwargs)
    except Exception as error:  # the checker itself failed: say so, never a verdict
        return dict(traps=["checker error"], text=f"checker error: {type(error).__name__}: {error}", how="",
                    seconds=time.perf_counter() - started)
    return dict(traps=list(report.traps), text=str(report), how="the real Function and arguments",
                seconds=time.perf_counter() - started)


def run_gradcheck(fn, small, clone, fp32_inside, no_grad=()):
    """gradcheck's verdict in float64 (and float32, loosely, where the kernels compute in fp32). no_grad:
    the forward's arguments the op takes no gradient for (the checker's no_grad), held fixed here too."""
    import torch
    from torch.autograd.gradcheck import GradcheckError
    names = list(inspect.signature(fn.forward).parameters)[1:]
    fixed = {i for i, name in enumerate(names) if name in no_grad}
    readings = []
    for dtype, tolerances in ((torch.float64, {}), (torch.float32, dict(eps=1e-3, atol=1e-2, rtol=1e-2))):
        if dtype == torch.float32 and not fp32_inside:
            break
        device = "cuda" if torch.cuda.is_available() else "cpu"
        values = [v.to(device, dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else
                  v.to(device) if isinstance(v, torch.Tensor) else v for v in small]
        where = [i for i, v in enumerate(values) if isinstance(v, torch.Tensor) and v.is_floating_point()
                 and i not in fixed]
        for i in where:
            values[i] = values[i].detach().requires_grad_(True)

        def call(*tensors):
            full = list(values)
            for i, t in zip(where, tensors):
                full[i] = t.clone() if clone else t
            out = fn.apply(*positional(fn, full, {}))
            out = out if isinstance(out, tuple) else (out,)
            return tuple(o for o in out if isinstance(o, torch.Tensor) and o.is_floating_point())
        label = "float64" if dtype == torch.float64 else "float32 (eps 1e-3, atol 1e-2)"
        try:
            torch.autograd.gradcheck(call, tuple(values[i] for i in where), **tolerances)
            readings.append(f"{label}: pass")
        except Exception as error:  # gradcheck's own failure, or the op's
            first = " ".join(str(error).split())[:150]
            kind = "fail" if isinstance(error, GradcheckError) else "error"
            readings.append(f"{label}: {kind} ({type(error).__name__}: {first})")
    return readings


def run_opcheck(fn, args, kwargs):
    import torch
    if not isinstance(fn, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return "does not apply (an autograd.Function, not a registered custom op)"
    try:
        torch.library.opcheck(fn, args, kwargs)
        return "pass"
    except Exception as error:  # opcheck's report of what failed
        return f"fail ({type(error).__name__}: {' '.join(str(error).split())[:150]})"


def pin_autotune():
    """Every Triton autotuner runs one config, the first of its list that fits this GPU (one whose
    kernel compiles within the GPU's shared memory), instead of benchmarking every config for each
    shape (fla-core autotunes for every shape the checker draws). Each shape then compiles once. The
    verdicts are about strides, grids and formulas, which every config must get right."""
    import triton.runtime.autotuner as autotuner

    def too_big(error):
        return type(error).__name__ == "OutOfResources"
    original_init, original_run = autotuner.Autotuner.__init__, autotuner.Autotuner.run

    def first_config_only(self, fn, arg_names, configs=None, *args, **kwargs):
        configs = list(configs or [])
        original_init(self, fn, arg_names, configs[:1] or configs, *args, **kwargs)
        self.spare_configs = configs[1:]

    def first_that_fits(self, *args, **kwargs):
        while True:
            try:
                return original_run(self, *args, **kwargs)
            except Exception as error:  # noqa: BLE001  (only a config too big for this GPU is retried)
                if not too_big(error) or not self.spare_configs:
                    raise
                self.configs = [self.spare_configs.pop(0)]
    autotuner.Autotuner.__init__, autotuner.Autotuner.run = first_config_only, first_that_fits


def forward_agreement(fn, args, kwargs, reference):
    """The reference validated against the Function's own forward, on the device, at the given
    arguments: the largest relative difference over the outputs the reference gives."""
    import torch
    device = common.device()
    moved = [a.to(device, copy=True) if isinstance(a, torch.Tensor) else a for a in positional(fn, args, kwargs)]
    with torch.no_grad():
        got = fn.apply(*[a.clone() if isinstance(a, torch.Tensor) else a for a in moved])
        expected = reference(*[a.clone() if isinstance(a, torch.Tensor) else a for a in moved])
    got = got if isinstance(got, tuple) else (got,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    worst = 0.0
    for g, e in zip(got, expected):
        if isinstance(g, torch.Tensor) and isinstance(e, torch.Tensor) and g.is_floating_point():
            scale = e.double().abs().max().clamp_min(1e-12)
            worst = max(worst, ((g.double() - e.double()).abs().max() / scale).item())
    return worst


def vendored_source(site, fn):
    """Where fn's code came from: it must be a file in the release's folder."""
    path = Path(inspect.getsourcefile(fn)).resolve()
    return str(path) if str(path).startswith(str(Path(site).resolve())) else None


def release_origin(dist, site, vendored, fn=None):
    """(version, where it came from), refusing a release found anywhere but its own folder."""
    import importlib.metadata
    if vendored:
        version = Path(site).name.rpartition("-")[2]
        located = vendored_source(site, fn) if fn is not None else str(Path(site).resolve())
        if located is None:
            raise SystemExit(f"{fn.__name__} came from {inspect.getsourcefile(fn)}, not from {site}")
        return version, located
    version = importlib.metadata.version(dist)
    located = str(importlib.metadata.distribution(dist).locate_file(""))
    if not located.startswith(str(Path(site).resolve())):
        raise SystemExit(f"{dist} {version} came from {located}, not from {site}")
    return version, located


def child(job, site):
    """Runs in a fresh interpreter with only the release's folder added to the path. job: a case's
    name, or sweep:<dist>."""
    check_backward = load_checker()  # first: it picks the backend before anything imports triton
    if os.environ.get(PIN_VARIABLE) == "1":
        pin_autotune()
    if job.startswith("sweep:"):
        module = SWEEPS[job[len("sweep:"):]]
        version, located = release_origin(module.SWEEP.dist, site, module.SWEEP.vendored)
        result = dict(version=version, findings=sweep(check_backward, module), probes=run_probes(module))
    else:
        case = next(c for c in CASES if c.name == job)
        call = getattr(CASE_MODULE[job], case.setup)()
        version, located = release_origin(case.dist, site, case.vendored, call["fn"])
        checker = run_checker(check_backward, call["fn"], call["args"], call["kwargs"], call["reference"],
                              f"{call['fn'].__name__} ({case.dist} {version})")
        result = dict(version=version, checker=checker,
                      gradcheck=run_gradcheck(call["fn"], call["small"], call.get("clone", False), case.fp32_inside,
                                              call["kwargs"].get("no_grad", ())),
                      opcheck=run_opcheck(*call.get("opcheck", (call["fn"], call["args"], call["kwargs"]))))
    result["site"] = located
    result["interpreted"] = os.environ.get("TRITON_INTERPRET") == "1"
    print(RESULT_MARK + json.dumps(result), flush=True)


def sweep(check_backward, module):
    findings = []
    for label, fn, args, kwargs, reference in module.sweep_calls():
        try:
            agreement = f"{forward_agreement(fn, args, {k: v for k, v in kwargs.items() if k != 'no_grad'}, reference):.2g}"
        except Exception as error:  # noqa: BLE001  (the checker's own forward check then says more)
            agreement = f"could not compare ({type(error).__name__}: {' '.join(str(error).split())[:100]})"
        result = run_checker(check_backward, fn, args, kwargs, reference, f"{fn.__name__}")
        findings.append(dict(label=label, function=fn.__name__, forward=agreement, **result))
    return findings


def run_probes(module):
    """The library's probes, each provoking one flag by hand; one that cannot run shows nothing."""
    if not hasattr(module, "sweep_probes"):
        return []
    try:
        return [list(p) for p in module.sweep_probes()]
    except Exception as error:  # noqa: BLE001
        return [["(all)", f"the probes raised {type(error).__name__}: {' '.join(str(error).split())[:160]}", False]]


# ---------------------------------------------------------------------------
# The parent: wheels, folders, subprocesses, the table
# ---------------------------------------------------------------------------

def normalized(dist):
    return dist.replace("-", "_")


def vendored_archive(wheels, dist, version):
    return wheels / f"{normalized(dist)}-{version}.vendored.zip"


def wheel_for(wheels, dist, version):
    found = sorted(wheels.glob(f"{normalized(dist)}-{version}-*.whl"))
    return found[0] if found else None


def release_files(wheels, dist, version, vendored):
    """The file a release installs from (its wheel, or the archive of its vendored files), or None."""
    if vendored:
        archive = vendored_archive(wheels, dist, version)
        return archive if archive.exists() else None
    return wheel_for(wheels, dist, version)


def releases():
    """(dist, version, vendored files, stubs) of every release a case or a sweep runs."""
    pairs = [(c.dist, v, c.vendored, c.stubs) for c in CASES for v in (c.buggy, c.fixed)]
    pairs += [(m.SWEEP.dist, m.SWEEP.version, m.SWEEP.vendored, m.SWEEP.stubs) for m in SWEEPS.values()]
    return list(dict.fromkeys(pairs))


def fetch_vendored(wheels, dist, version, vendored):
    """The named files of a release, out of its wheel (or its sdist where it has none), into a small zip."""
    import io
    import tarfile
    import urllib.request
    import zipfile
    import urllib.parse
    index = f"https://pypi.org/pypi/{dist}/json"
    with urllib.request.urlopen(index, timeout=120) as reply:
        urls = json.load(reply)["releases"][version]
    wheel = [u for u in urls if u["packagetype"] == "bdist_wheel" and u["filename"].endswith("-none-any.whl")]
    chosen = (wheel or [u for u in urls if u["packagetype"] == "sdist"])[0]
    with urllib.request.urlopen(urllib.parse.urljoin(index, chosen["url"]), timeout=600) as reply:  # a mirror's may be relative
        data = reply.read()
    found = {}
    if chosen["packagetype"] == "bdist_wheel":
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            found = {name: archive.read(name) for name in archive.namelist() if name in vendored}
    else:
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            for member in archive.getmembers():
                inside = member.name.split("/", 1)[-1]  # past the sdist's top folder
                if inside in vendored and member.isfile():
                    found[inside] = archive.extractfile(member).read()
    missing = sorted(set(vendored) - set(found))
    if missing:
        raise RuntimeError(f"{dist} {version}'s {chosen['filename']} lacks {', '.join(missing)}")
    with zipfile.ZipFile(vendored_archive(wheels, dist, version), "w") as archive:
        archive.writestr("SOURCE", f"{chosen['filename']} sha256 {chosen['digests']['sha256']}\n")
        for name in sorted(found):
            archive.writestr(name, found[name])


def download(wheels):
    wheels.mkdir(parents=True, exist_ok=True)
    wanted = [(d, v, vendored) for d, v, vendored, _ in releases()]
    extras = sorted({w for d, _, _, _ in releases() for w in extra_wheels(d)})
    for dist, version, vendored in wanted + [(w.partition("==")[0], w.partition("==")[2], ()) for w in extras]:
        if vendored:
            try:
                fetch_vendored(wheels, dist, version, vendored)
                continue
            except (OSError, RuntimeError, KeyError, IndexError, ValueError) as error:
                print(f"in_the_wild: could not fetch {dist}=={version}'s files: {error}", file=sys.stderr)
                return 2
        command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                   *PLATFORM_PINS, "-d", str(wheels), f"{dist}=={version}"]
        if subprocess.run(command).returncode != 0:  # one at a time: pip refuses two versions of one name in one call
            print(f"in_the_wild: could not download {dist}=={version}", file=sys.stderr)
            return 2
    print(f"{len(wanted) + len(extras)} releases in {wheels}")
    return 0


def install_vendored(archive_path, target, stubs):
    """common.VENDORED: the named files, an empty __init__.py in each package folder above them that
    has none of its own, and the stubs beside them."""
    import zipfile
    with zipfile.ZipFile(archive_path) as archive:
        names = [n for n in archive.namelist() if n != "SOURCE"]
        archive.extractall(target, members=names)
    for module, source in stubs:
        path = Path(*module.split(".")).with_suffix(".py")
        (target / path).parent.mkdir(parents=True, exist_ok=True)
        (target / path).write_text(source)
        names.append(str(path))
    for name in names:
        for parent in Path(name).parents:
            if str(parent) != "." and not (target / parent / "__init__.py").exists():
                (target / parent / "__init__.py").write_text("")


def install(wheels, dist, version, root, vendored=(), stubs=()):
    """The release (its wheel, or its vendored files), and any pure-Python need missing here, into a
    folder of its own."""
    import importlib.util
    target = Path(root) / f"{dist}-{version}"
    if vendored:
        target.mkdir(parents=True)
        install_vendored(vendored_archive(wheels, dist, version), target, stubs)
        files = []
    else:
        files = [wheel_for(wheels, dist, version)]
    for need in extra_wheels(dist):
        name, _, pinned = need.partition("==")
        if importlib.util.find_spec(name) is None:
            files.append(wheel_for(wheels, name, pinned))
    if files:
        command = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                   "--disable-pip-version-check", "--target", str(target), *map(str, files)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"pip could not install {dist} {version}: {done.stderr.strip()[-300:]}")
    return target


def run_child(job, site, interpret, timeout, pinned=False):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(REPO)]), PYTHONUNBUFFERED="1")
    env[PIN_VARIABLE] = "1" if pinned else "0"
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    command = [sys.executable, str(Path(__file__).resolve()), "--child", job, "--site", str(site)]
    started = time.perf_counter()
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict(error=f"timed out after {timeout} s")
    for line in done.stdout.splitlines():
        if line.startswith(RESULT_MARK):
            return dict(json.loads(line[len(RESULT_MARK):]), wall=time.perf_counter() - started)
    lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
    return dict(error=f"exit {done.returncode}: {lines[-1] if lines else 'no output'}"[:200])


def judge(case, role, result):
    """'as expected', or why not: a buggy release must show the case's trap, a fixed one no trap
    beyond the case's known ones."""
    if "error" in result:
        return "NO: " + result["error"][:120]
    traps = result["checker"]["traps"]
    known = {t for t, _ in case.known}
    if role == "buggy":
        return "as expected" if case.expected in traps else f"NO: {case.expected!r} not flagged"
    extra = [t for t in traps if t not in known]
    return "as expected" if not extra else f"NO: flagged {extra}"


def header(pinned):
    import platform
    import torch
    import triton
    from stamp import lines
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (Triton interpreter)"
    autotune = ("each autotuned kernel pinned to its first config that fits the GPU (--pin-autotune: every shape "
                "compiles once)"
                if pinned else "the libraries' own autotuning")
    return [*lines(), f"python {platform.python_version()}, torch {torch.__version__}, "
            f"triton {triton.__version__}, GPU: {gpu}", f"autotune: {autotune}",
            f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}"]


def print_cases():
    for c in CASES:
        print(f"{c.name}: {c.dist} {c.buggy} (buggy) -> {c.fixed} (fixed); trap: {c.trap_class}; "
              f"checker: {c.expected!r}; {' '.join(c.links)}")


def short_gradcheck(reading):
    """'float64: fail (GradcheckError: ...)' -> 'f64 fail'."""
    label, _, rest = reading.partition(": ")
    return f"f{label[5:7]} {rest.split(' ')[0]}"


def table(heads, rows):
    widths = [max([len(heads[i]), *(len(r[i]) for r in rows)]) for i in range(len(heads))]
    lines = [" | ".join(h.ljust(w) for h, w in zip(heads, widths)), "-+-".join("-" * w for w in widths)]
    lines += [" | ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


def run_job(job, dist, version, vendored, stubs, wheels, root, interpret, timeout, pinned):
    try:
        return run_child(job, install(wheels, dist, version, root, vendored, stubs), interpret, timeout, pinned)
    except RuntimeError as error:
        return dict(error=str(error))


def report_case(case, pending, rows):
    """A case's two releases, printed; True if both are as expected."""
    print(f"\n== {case.name}: {case.dist} {case.buggy} -> {case.fixed}, {case.trap_class}")
    print("   " + " ".join(case.links))
    if case.vendored:
        print("   loaded: only " + ", ".join(case.vendored) + " (vendored; see research/wild/common.py)")
    expected = True
    for role, version in (("buggy", case.buggy), ("fixed", case.fixed)):
        result = pending[(case.name, version)].result()
        verdict = judge(case, role, result)
        expected &= verdict == "as expected"
        if "error" in result:
            print(f"-- {version} ({role}): {result['error']}")
            rows.append((case.name, f"{version} {role}", "error", "-", "-", verdict))
            continue
        checker = result["checker"]
        print(f"-- {case.dist} {version} ({role}), checked with {checker['how']} "
              f"in {checker['seconds']:.1f} s ({result['wall']:.0f} s with import and gradcheck):")
        print("\n".join("   " + line for line in checker["text"].splitlines()))
        print("   gradcheck: " + "; ".join(result["gradcheck"]))
        print("   opcheck: " + result["opcheck"])
        known = [(t, link) for t, link in case.known if t in checker["traps"]]
        if known:
            print("   known, in both releases: " + ", ".join(f"{t} ({link})" for t, link in known))
        print(f"   verdict: {verdict}")
        rows.append((case.name, f"{version} {role}", ", ".join(checker["traps"]) or "clean",
                     ", ".join(short_gradcheck(r) for r in result["gradcheck"]),
                     "n/a" if result["opcheck"].startswith("does not apply") else result["opcheck"], verdict))
    return expected


def print_sweep(module, result):
    """A sweep's findings and probes, printed; False if it could not run."""
    dist, version = module.SWEEP.dist, module.SWEEP.version
    if "error" in result:
        print(f"\n== sweep of {dist} {version}: {result['error']}")
        return False
    print(f"\n== sweep: {dist} {result['version']}, each public Function against a torch reference "
          f"({module.SWEEP.loaded}; {result['wall']:.0f} s)")
    rows = []
    for f in result["findings"]:
        print(f"-- {f['label']} ({f['function']}), forward vs reference {f['forward']}, checked with {f['how']} "
              f"in {f['seconds']:.1f} s:")
        print("\n".join("   " + line for line in f["text"].splitlines()))
        rows.append((f["label"], f["function"], f["forward"].split(" (")[0], ", ".join(f["traps"]) or "clean"))
    print("\n" + table(("op", "Function", "forward vs reference", "checker (traps)"), rows))
    print(f"\n-- {dist}: each flag provoked by hand, without the checker:")
    probes = result.get("probes", [])
    for function, saw, shown in probes:
        print(f"   {function}: {saw}: {'the trap shows' if shown else 'NOT shown'}")
    flagged = {f["function"] for f in result["findings"] if f["traps"]}
    unprobed = sorted(flagged - {function for function, _, _ in probes})
    unshown = [function for function, _, shown in probes if not shown]
    if unprobed or unshown:
        print(f"   NOT every flag is shown real: no probe for {', '.join(unprobed) or 'none'}; a probe that "
              f"did not show its trap for {', '.join(unshown) or 'none'}")
        return False
    print(f"   every flagged Function ({len(flagged)}) has a probe beside it, and every probe showed its trap")
    return True


def run_everything(cases, sweeps, wheels, interpret, jobs, timeout, pinned):
    """Every release of every case and every sweep, each in its own subprocess (jobs at a time, the
    sweeps first: they are the longest), reported in order. True if every case came out as expected
    and every sweep ran."""
    import concurrent.futures
    rows, ok = [], True
    with tempfile.TemporaryDirectory(prefix="in_the_wild_") as root, \
            concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        sweeping = {m.SWEEP.dist: pool.submit(run_job, f"sweep:{m.SWEEP.dist}", m.SWEEP.dist, m.SWEEP.version,
                                              m.SWEEP.vendored, m.SWEEP.stubs, wheels, Path(root) / "sweeps",
                                              interpret, timeout, pinned) for m in sweeps}
        pending = {(c.name, v): pool.submit(run_job, c.name, c.dist, v, c.vendored, c.stubs, wheels,
                                            Path(root) / c.name, interpret, timeout, pinned)
                   for c in cases for v in (c.buggy, c.fixed)}
        for case in cases:
            ok &= report_case(case, pending, rows)
        if rows:
            print("\n" + table(("case", "release", "checker (traps)", "gradcheck", "opcheck", "verdict"), rows))
        for module in sweeps:
            ok &= print_sweep(module, sweeping[module.SWEEP.dist].result())
    return ok


def main(argv=None):
    parser = argparse.ArgumentParser(description="Run the chapter's traps on real libraries' buggy and fixed "
                                                 "releases (needs a CUDA GPU).")
    parser.add_argument("--wheels", type=Path, default=DEFAULT_WHEELS, help="folder of the releases' wheels")
    parser.add_argument("--case", action="append", choices=[c.name for c in CASES], help="run only this case")
    parser.add_argument("--sweep", action="store_true", help="also sweep each library's current release")
    parser.add_argument("--sweep-only", action="store_true", help="only the sweeps")
    parser.add_argument("--library", action="append", choices=list(MODULES),
                        help="only this library's cases and sweep (research/wild/<name>.py)")
    parser.add_argument("--download", action="store_true", help="download the wheels into --wheels and stop")
    parser.add_argument("--list", action="store_true", help="list the cases and stop")
    parser.add_argument("--interpret", action="store_true",
                        help="without a GPU, run in Triton's interpreter anyway (no evidence: exits 2)")
    parser.add_argument("--jobs", type=int, default=1, help="releases checked at once (default 1)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds one release may take (default 600)")
    parser.add_argument("--pin-autotune", action="store_true",
                        help="run each autotuned kernel's first config that fits the GPU, so every shape compiles once")
    parser.add_argument("--compile", nargs="?", const="default", metavar="BACKEND",
                        help="also check each Function under torch.compile against itself eagerly (inductor, or the "
                             "backend named)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--site", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.site)
        return 0
    if args.jobs < 1 or args.timeout < 1:
        parser.error("--jobs and --timeout take a positive number")
    if args.sweep_only and args.case:
        parser.error("--sweep-only runs no case: give --case without it, or --sweep to run both")
    if args.case and not any(c.name in args.case for name, m in MODULES.items()
                             if not args.library or name in args.library for c in m.CASES):
        parser.error(f"--case {' '.join(args.case)}: no such case" + (f" in {', '.join(args.library)}"
                                                                       if args.library else "")
                     + " (--list lists them)")
    if args.list:
        print_cases()
        return 0
    if args.download:
        return download(args.wheels)
    import torch
    if not torch.cuda.is_available() and not args.interpret:
        print("in_the_wild: needs a CUDA GPU. These releases' kernels are Triton kernels, and Triton's "
              "interpreter is not the truth for them (one release behaved differently there), so a run "
              "without a GPU would be no evidence. --interpret runs anyway, and still exits 2.", file=sys.stderr)
        return 2
    chosen = [m for name, m in MODULES.items() if not args.library or name in args.library]
    cases = [] if args.sweep_only else [c for m in chosen for c in m.CASES if not args.case or c.name in args.case]
    sweeps = [m for m in chosen if hasattr(m, "SWEEP")] if args.sweep or args.sweep_only else []
    wanted = [(c.dist, v, c.vendored) for c in cases for v in (c.buggy, c.fixed)]
    wanted += [(m.SWEEP.dist, m.SWEEP.version, m.SWEEP.vendored) for m in sweeps]
    missing = [f"{d} {v}" for d, v, vendored in wanted if release_files(args.wheels, d, v, vendored) is None]
    if missing:
        print(f"in_the_wild: no wheel in {args.wheels} for {', '.join(missing)} (run with --download where "
              "there is a network)", file=sys.stderr)
        return 2
    if args.compile:
        os.environ[COMPILE_VARIABLE] = args.compile  # every child's checker reads it
    print("\n".join(header(args.pin_autotune)))
    if args.compile:
        print(f"compile check: {'the default backend' if args.compile == 'default' else args.compile}")
    if args.interpret and not torch.cuda.is_available():
        print("INTERPRETED: Triton's interpreter on the CPU; these verdicts are not evidence")
    started = time.perf_counter()
    ok = run_everything(cases, sweeps, args.wheels, args.interpret, args.jobs, args.timeout, args.pin_autotune)
    print(f"\n{len(cases)} cases and {len(sweeps)} sweeps in {time.perf_counter() - started:.0f} s "
          f"({args.jobs} at a time)")
    if args.interpret and not torch.cuda.is_available():
        return 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
