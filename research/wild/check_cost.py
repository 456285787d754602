"""
Where one plugin check of a large op spends its time
====================================================

The pytest plugin's cost on a suite of large ops is its checks: each recorded call's arguments are copied (the
recording), handed to the worker process, and checked there. This tool times each stage of that, stage by stage,
on Liger-Kernel's cross entropy (its 0.5.8 release, as research/wild/suites.py --download puts it in .wild-suites)
called on 8192 x 32000 bfloat16 logits, the size of its own tests, with reduction 'none' and 'sum' (--op ce, the
default); or, with --op flce, on its fused linear + cross entropy (0.8.1) as the first test of its own file calls it:
1024 x 1024 bfloat16 rows against 4096 classes with a bias, reduction 'mean' and 'none' (--breakdown: 'mean' only):

  - the recording's copy onto the CPU, and for comparison the same into pinned memory;
  - the parcel the worker is sent: a file it maps (worker.parcel_of), or bytes through the pipe, as the worker
    received them before;
  - the check in this process, twice (the second run is the A/A control);
  - the whole round trip through a worker process, with a file and with bytes;
  - the round trip with the worker's kernel launches waiting for each kernel (CUDA_LAUNCH_BLOCKING=1, as the worker
    runs unless the suite set it) and not, for that call and for a small op (hardened_ops.TritonGELU on 3 x 20).

With --breakdown it times, instead, where one check's seconds go: each of the checker's checks alone (a check
that finds a trap on a GPU is run again with the next seed by the plugin; this times one run), the set-up
before the first check (the right gradient by finite differences, the op's measured noise), and the same check
under torch.profiler: the GPU's busy time against the wall clock, the kernels and the operators that take most
(in this process, whose launches do not wait for each kernel as the worker's do: about half a second of a check
of this op, by the stages above). It first runs the check once cold, as the plugin's first check of an op runs,
and says how many Triton kernels that run compiled and how long it took, against the warm runs after it.

    python3 research/wild/check_cost.py [--log PATH] [--rows N]                 # a CUDA GPU; the log is also printed
    python3 research/wild/check_cost.py --breakdown [--log PATH] [--rows N]
    python3 research/wild/check_cost.py --op flce --breakdown [--log PATH]

Exit status: 0 done; 2 no CUDA GPU, or the release not downloaded.
"""
import argparse
import collections
import io
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RELEASES = {"ce": "liger-kernel-0.5.8", "flce": "liger-kernel-0.8.1"}
OP = sys.argv[sys.argv.index("--op") + 1] if "--op" in sys.argv[:-1] else "ce"
SITE = REPO / ".wild-suites" / RELEASES.get(OP, RELEASES["ce"]) / "site"
sys.path[:0] = [str(REPO), str(REPO / "backward-check"), str(REPO / "tools"), str(SITE)]


def synchronize():
    """Waits for the GPU's work, where a GPU is in use."""
    import torch
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def seconds(fn):
    """fn() and the seconds it took, the GPU's work included."""
    synchronize()
    start = time.perf_counter()
    result = fn()
    synchronize()
    return result, time.perf_counter() - start


def breakdown(op, job, arguments, say, top=12):
    """One run of the check (child.check_once: one seed) on arguments() (fresh args and kwargs each run), each of the
    checker's checks timed alone, the GPU's work included; then the same run under torch.profiler: the GPU's busy
    time, and the kernels and operators that take most. Runs on any device (the tests run it on the CPU)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    from backward_check import runner
    from backward_check.plugin import child
    took = collections.Counter()
    attempt = runner.attempt

    def timed(check, context):
        synchronize()
        start = time.perf_counter()
        try:
            return attempt(check, context)
        finally:
            synchronize()
            took[check.name] += time.perf_counter() - start

    runner.attempt = timed
    try:
        (verdict, _), total = seconds(lambda: child.check_once(op, job, *arguments(), job.seed))
    finally:
        runner.attempt = attempt
    say(f"  one run of the check: {total:6.2f} s  {verdict.summary[:90]}")
    say(f"    before the first check and after the last (the inputs, the right gradient, the op's noise): "
        f"{total - sum(took.values()):6.2f}")
    for name, spent in took.most_common():
        say(f"    {name:<40} {spent:6.2f}")
    on_gpu = torch.cuda.is_available() and torch.cuda.is_initialized()
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if on_gpu else [])]
    with profile(activities=activities) as profiled:
        _, total = seconds(lambda: child.check_once(op, job, *arguments(), job.seed))
    events = profiled.key_averages()
    device_key = "self_device_time_total" if hasattr(events[0], "self_device_time_total") else "self_cuda_time_total"
    # The GPU's busy time: its kernels' own time (torch's table sums the same; a CPU operator's device time repeats
    # its kernels').
    busy = sum(getattr(e, device_key) for e in events
               if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)) / 1e6
    say(f"  the same run under torch.profiler: {total:6.2f} s of wall clock"
        + (f", the GPU busy {busy:6.2f} s of it" if on_gpu else " (no GPU in use)"))
    for key, what in ((device_key, "kernels and operators by their own GPU time"),
                      ("self_cpu_time_total", "operators by their own CPU time")):
        if key == device_key and not on_gpu:
            continue
        say(f"  {what}:")
        for line in events.table(sort_by=key, row_limit=top).splitlines():
            say(f"    {line}".rstrip())


def compiled_kernels():
    """How many Triton kernels this process holds compiled (every JIT function's in-memory cache, on every
    device): the difference across a run is what it compiled (or loaded from Triton's disk cache)."""
    import gc
    import warnings
    try:
        from triton.runtime.jit import JITFunction
    except ImportError:
        return 0
    with warnings.catch_warnings():  # isinstance on every object wakes torch's deprecated aliases' warnings
        warnings.simplefilter("ignore")
        functions = [o for o in gc.get_objects() if isinstance(o, JITFunction)]
    count = 0
    for fn in functions:
        for binder in getattr(fn, "device_caches", {}).values():
            cache = binder[0] if isinstance(binder, tuple) else binder
            count += len(cache) if isinstance(cache, dict) else 0
    return count


def cold_then_warm(op, job, arguments, say, runs=2):
    """The check run once cold (the plugin's first check of an op: what it compiles is in its time), then warm."""
    from backward_check.plugin import child
    for run in range(runs + 1):
        before = compiled_kernels()
        (verdict, _), took = seconds(lambda: child.check_once(op, job, *arguments(), job.seed))
        say(f"  {'cold' if run == 0 else f'warm {run}'}: {took:6.2f} s, {compiled_kernels() - before} Triton kernels "
            f"compiled  {verdict.summary[:90]}")


def recorded(op, args, copies, nbytes):
    """The call of op on args as the plugin records it (copies: copy_value's of args), and its job."""
    from backward_check.plugin import worker
    from backward_check.plugin.recording import RecordedCall, signature_of
    signature, described = signature_of(args, {}, {})
    call = RecordedCall(op, f"{op.__module__}.{op.__qualname__}", signature, described, (), "t", nbytes, copies, {})
    return call, worker.job_of(call, ())


def launches(call, job, say):
    """Round trips of call through a worker whose launches wait for each kernel (the default) and one whose do not,
    alternately, twice each (after one round trip that starts both and compiles)."""
    from backward_check.plugin import worker
    was = os.environ.get("CUDA_LAUNCH_BLOCKING")
    workers = {}
    try:
        for blocking in ("1", "0"):
            os.environ["CUDA_LAUNCH_BLOCKING"] = blocking  # the worker sets it only where the suite has not
            workers[blocking] = worker.Worker(timeout=600.0)
            workers[blocking].check(call, job)
        for run in (1, 2):
            for blocking, started in workers.items():
                (verdict, why), took = seconds(lambda: started.check(call, job))
                say(f"    {call.name.split('.')[-1]}, CUDA_LAUNCH_BLOCKING={blocking}, run {run}: {took:6.2f}  "
                    f"{why or verdict.summary[:60]}")
    finally:
        for started in workers.values():
            started.stop()
        if was is None:
            os.environ.pop("CUDA_LAUNCH_BLOCKING", None)
        else:
            os.environ["CUDA_LAUNCH_BLOCKING"] = was


def started_log(stamp, torch, command, what):
    """The log's lines so far (the stamp, the machine, the command, what it times), printed, and say(line), which
    prints a line and keeps it."""
    lines = [*stamp.lines(), f"python {sys.version.split()[0]}, torch {torch.__version__}, "
             f"GPU: {torch.cuda.get_device_name()}", f"command: {command}", what]
    for line in lines:
        print(line)

    def say(line):
        lines.append(line)
        print(line, flush=True)

    return lines, say


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log", type=Path, help="also write the log here")
    parser.add_argument("--op", choices=sorted(RELEASES), default="ce",
                        help="ce: the cross entropy (0.5.8); flce: the fused linear + cross entropy (0.8.1)")
    parser.add_argument("--rows", type=int, default=None,
                        help="rows of the logits (default 8192), or of the fused loss's input (default 1024)")
    parser.add_argument("--breakdown", action="store_true",
                        help="time one check's parts instead: each check alone, its set-up, and a profile")
    options = parser.parse_args()
    import torch
    if not torch.cuda.is_available():
        print("check_cost.py: no CUDA GPU; it times a Triton kernel on one", file=sys.stderr)
        return 2
    if not SITE.is_dir():
        print(f"check_cost.py: {SITE.relative_to(REPO)} is missing; run research/wild/suites.py --download first",
              file=sys.stderr)
        return 2
    import stamp
    from backward_check.plugin import child, worker
    from backward_check.plugin.recording import copy_value, restore_value
    if options.op == "flce":
        return fused_loss(options, torch, stamp, child, copy_value, restore_value)
    from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction
    options.rows = options.rows or 8192

    lines, say = started_log(stamp, torch,
                             f"python3 research/wild/check_cost.py{' --breakdown' * options.breakdown} --rows {options.rows}",
                             "seconds of each stage, for one recorded call of LigerCrossEntropyFunction (liger-kernel "
                             f"0.5.8) on ({options.rows}, 32000) bfloat16 logits")
    for reduction in ("none", "sum"):
        torch.manual_seed(0)
        logits = torch.randn(options.rows, 32000, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        target = torch.randint(0, 32000, (options.rows,), device="cuda")
        args = (logits, target, None, -100, 0.0, 0.0, reduction, None, False)
        say(f"\nreduction {reduction!r}")
        nbytes = logits.numel() * logits.element_size()
        if options.breakdown:
            copies = copy_value(args)
            call, job = recorded(LigerCrossEntropyFunction, args, copies, nbytes)
            child.check_once(LigerCrossEntropyFunction, job, restore_value(copies), {}, job.seed)  # compiles
            breakdown(LigerCrossEntropyFunction, job, lambda: (restore_value(copies), {}), say)
            continue
        # The recording's copy, and the same into pinned memory (a comparison only: the plugin copies as above).
        copies, took = seconds(lambda: copy_value(args))
        say(f"  record: copy onto the CPU                          {took:6.2f}")
        pinned = [seconds(lambda: torch.empty(logits.shape, dtype=logits.dtype, pin_memory=True)
                          .copy_(logits.detach()))[1] for _ in range(2)]
        say(f"  (into pinned memory, for comparison: {pinned[0]:.2f}, again {pinned[1]:.2f})")
        # The parcel: a file the worker maps, or bytes.
        sent = {"job": copies}
        parcel, took = seconds(lambda: worker.parcel_of(sent, nbytes))
        say(f"  parcel: written to a file ({parcel[0]} in {os.path.dirname(parcel[1]) if parcel[0] == 'file' else '-'})"
            f"  {took:6.2f}")
        received, took = seconds(lambda: restore_value(child.unpacked(*parcel)["job"]))
        say(f"  parcel: mapped and put on the GPU                  {took:6.2f}")
        worker.remove_parcel(parcel)
        buffer, took = seconds(lambda: (lambda b: (torch.save(sent, b), b.getvalue())[1])(io.BytesIO()))
        say(f"  bytes (before): torch.save into memory             {took:6.2f}")
        received, took = seconds(lambda: restore_value(torch.load(io.BytesIO(buffer), weights_only=False)["job"]))
        say(f"  bytes (before): loaded and put on the GPU          {took:6.2f}")
        del buffer, received
        # The check in this process, twice.
        call, job = recorded(LigerCrossEntropyFunction, args, copies, nbytes)
        worker.check_call(LigerCrossEntropyFunction, job, restore_value(copies), {})  # compiles the new layouts
        for run in (1, 2):
            verdict, took = seconds(lambda: worker.check_call(LigerCrossEntropyFunction, job, restore_value(copies),
                                                              {}))
            say(f"  check here, run {run}: {took:6.2f}  {verdict.summary[:90]}")
        # The round trip through a worker process: a file, then bytes.
        started = worker.Worker(timeout=600.0)
        folders = worker._folders_for_parcels
        try:
            started.check(call, job)  # starts it, and compiles there
            for label, where in (("a file", folders), ("bytes (before)", lambda n: [])):
                worker._folders_for_parcels = where
                for run in (1, 2):
                    (verdict, why), took = seconds(lambda: started.check(call, job))
                    say(f"  worker round trip, {label}, run {run}: {took:6.2f}  {why or verdict.summary[:70]}")
        finally:
            worker._folders_for_parcels = folders
            started.stop()
        if reduction == "none":
            say("  launches: the worker's waiting for each kernel (CUDA_LAUNCH_BLOCKING=1) against not")
            launches(call, job, say)
            small = torch.randn(3, 20, device="cuda", requires_grad=True)
            from hardened_ops import TritonGELU
            launches(*recorded(TritonGELU, (small,), copy_value((small,)), small.nbytes), say)
    if options.log:
        options.log.write_text("\n".join(lines) + "\n")
    return 0


def fused_loss(options, torch, stamp, child, copy_value, restore_value):
    """--op flce: the fused linear + cross entropy as its test file's first test calls it (B x T = 8 x 128 rows of
    1,024 bfloat16 features, 4,096 classes, a bias), reduction 'mean' then 'none': each check cold, warm, and with
    --breakdown its parts."""
    from liger_kernel.ops.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction as op
    rows, hidden, classes = options.rows or 1024, 1024, 4096
    lines, say = started_log(stamp, torch,
                             f"python3 research/wild/check_cost.py --op flce{' --breakdown' * options.breakdown} "
                             f"--rows {rows}",
                             f"one recorded call of LigerFusedLinearCrossEntropyFunction (liger-kernel 0.8.1): ({rows}, "
                             f"{hidden}) bfloat16 input, ({classes}, {hidden}) weight and a bias, as "
                             "test_correctness's first case")
    for reduction in ("mean", "none"):
        torch.manual_seed(0)
        linear = torch.nn.Linear(hidden, classes, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        weight, bias = linear.weight.detach().requires_grad_(), linear.bias.detach().requires_grad_()
        target = torch.randint(0, classes, (rows,), device="cuda")
        args = (x, weight, target, bias, None, -100, 0.0, 0.0, reduction, None, False, None, False, False, False)
        nbytes = sum(t.numel() * t.element_size() for t in (x, weight, target, bias))
        out = op.apply(*args)[0]
        grad_output = torch.randn_like(out)
        best = min(seconds(lambda: torch.autograd.grad(op.apply(*args)[0], (x, weight, bias), grad_output))[1]
                   for _ in range(5))
        say(f"\nreduction {reduction!r}: the op's own forward + backward {best * 1e3:.2f} ms (best of 5)")
        copies = copy_value(args)
        _, job = recorded(op, args, copies, nbytes)
        cold_then_warm(op, job, lambda: (restore_value(copies), {}), say, runs=1)
        if options.breakdown and reduction == "mean":
            breakdown(op, job, lambda: (restore_value(copies), {}), say)
    if options.log:
        options.log.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
