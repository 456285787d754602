"""
The chapter's traps in real libraries
=====================================

Each case is a bug that a real library shipped, of a trap the chapter teaches, with the release
that had it and the release that fixed it. For each release this installs the wheel into a
folder of its own, imports it in a subprocess of its own (two versions never meet), and runs
three tools on the library's real autograd.Function, called with its real arguments:

  * the repository's backward checker (practice/backward_checker.py) with a torch reference;
  * torch.autograd.gradcheck, in float64 (and, where the kernels compute in fp32 anyway, also
    in float32 with loose tolerances, since float64 finite differences then only measure rounding);
  * torch.library.opcheck, where the op is a registered custom op (none of these are).

It prints one table and exits 0 only if every buggy release is flagged with its case's trap and
every fixed release is clean (a trap present in both releases, with an open issue, is listed
with the case as known and shown, not counted). --sweep runs the checker over a current
Liger-Kernel release's public Functions with torch references and reports each flag.

    python tools/in_the_wild.py --download          # fetch the wheels into .wild-wheels/ (network)
    python tools/in_the_wild.py [--case NAME] [--wheels DIR]    # on a machine with a CUDA GPU
    python tools/in_the_wild.py --sweep [--wheels DIR]
    python tools/in_the_wild.py --list              # the cases, no GPU needed

Exit status: 0 every release as expected (or the sweep ran); 1 a release not as expected;
2 a usage error, a missing wheel, or no CUDA GPU. The kernels are Triton kernels, and Triton's
interpreter is not the truth for them (one release behaved differently there), so without a GPU
the verdicts would be no evidence: --interpret runs them anyway, marks them so, and exits 2.
"""
import argparse
import dataclasses
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_WHEELS = REPO / ".wild-wheels"
PLATFORM_PINS = ["--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux_2_28_x86_64",
                 "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64"]
EXTRA_WHEELS = {"fla-core": ["einops==0.8.1"]}  # pure-Python needs, installed only where missing
SWEEP_RELEASE = ("liger-kernel", "0.8.5")
RESULT_MARK = "@@RESULT "
PIN_VARIABLE = "IN_THE_WILD_PIN_AUTOTUNE"


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    dist: str                 # the package's name on PyPI
    buggy: str
    fixed: str
    links: tuple
    trap_class: str           # the chapter's words
    expected: str             # the checker's trap name for the buggy release
    hid: str                  # how the bug hid: which test passed
    setup: str                # the function below that builds the call
    known: tuple = ()         # (trap, link): present in both releases, not this bug, an open issue
    fp32_inside: bool = False  # the kernels compute in fp32 whatever the input's dtype


KNOWN_CE_WRITE = ("writes into an input or a saved tensor", "https://github.com/linkedin/Liger-Kernel/issues/272")

CASES = (
    Case("liger-ce-none", "liger-kernel", "0.5.8", "0.5.9",
         ("https://github.com/linkedin/Liger-Kernel/issues/678", "https://github.com/linkedin/Liger-Kernel/pull/680"),
         "a uniform grad_output (17.1)", "assumes a uniform grad_output",
         "LigerCrossEntropyFunction with reduction='none' multiplied every row's gradient by grad_output[0]. "
         "The library's test compared gradients after backward(gradient=torch.ones_like(output)): every "
         "row's grad_output was 1, so the wrong row was the right one.",
         "setup_liger_ce", known=(KNOWN_CE_WRITE,), fp32_inside=True),
    Case("liger-flce-none", "liger-kernel", "0.8.1", "0.8.2",
         ("https://github.com/linkedin/Liger-Kernel/pull/1298",),
         "a uniform grad_output (17.1)", "assumes a uniform grad_output",
         "LigerFusedLinearCrossEntropyFunction with reduction='none' computes its gradients during forward "
         "and scaled all three (input, weight, bias) by grad_output[0] in backward. The forward was right; "
         "the gradient tests ran reduction='mean' and 'sum' only, where grad_output is one number.",
         "setup_liger_flce", fp32_inside=True),
    Case("fla-conv-dy-strides", "fla-core", "0.5.0", "0.5.1",
         ("https://github.com/fla-org/flash-linear-attention/pull/871",),
         "a non-contiguous grad_output (17.3)", "assumes a contiguous grad_output",
         "causal_conv1d's backward kernel read dy with hard-coded strides (D, 1). The tests called "
         "backward(dy) with dy = torch.randn(B, T, D), contiguous; in a model, torch.cat of q, k, v after "
         "their convolutions hands each one a narrow view of the gradient.",
         "setup_fla_conv", fp32_inside=True),
    Case("fla-conv-dh0-strides", "fla-core", "0.5.2", "0.6.0",
         ("https://github.com/fla-org/flash-linear-attention/issues/1138",
          "https://github.com/fla-org/flash-linear-attention/pull/1139"),
         "a non-contiguous grad_output, one input's gradient (17.3)", "assumes a contiguous grad_output",
         "After PR #871, the kernel for the initial state's gradient still addressed dy's last dimension "
         "with stride 1 and y with dy's strides. Only dh0 was wrong (dx, dweight, dbias right), and only "
         "with a non-contiguous dy, which plain y.sum().backward() hands on (every stride 0); the tests "
         "built their loss as (out * torch.randn_like(x)).sum(), so dy was contiguous.",
         "setup_fla_conv_state", fp32_inside=True),
    Case("fla-l2warp", "fla-core", "0.5.1", "0.5.2",
         ("https://github.com/fla-org/flash-linear-attention/pull/963",),
         "ignores grad_output (17.1)", "ignores grad_output",
         "L2Wrap.backward returned the logits' penalty gradient without multiplying it by grad_output. "
         "loss.backward() hands grad_output = 1, which hides it; loss scaling, gradient accumulation "
         "and torch.autograd.grad(grad_outputs=k) do not.",
         "setup_fla_l2warp"),
    Case("fla-gelu-bias", "fla-core", "0.5.0", "0.5.1",
         ("https://github.com/fla-org/flash-linear-attention/pull/921",),
         "one gradient per input (Chapter 15)", "returns the wrong gradients",
         "GeLUFunction.backward returned (tmp, tmp), a pair of pairs, for (input, bias). No test called "
         "its backward; the first one to do so raises.",
         "setup_fla_gelu"),
)


# ---------------------------------------------------------------------------
# The calls: the real Function, its real arguments, a torch reference (run in the child)
# ---------------------------------------------------------------------------

def _randn(*shape, seed):
    import torch
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _targets(n, classes, seed):
    import torch
    return torch.randint(0, classes, (n,), generator=torch.Generator().manual_seed(seed))


def positional(fn, args, kwargs):
    """args and kwargs bound to fn.forward's signature, defaults kept, as .apply takes them."""
    bound = inspect.signature(fn.forward).bind(None, *args, **kwargs)
    bound.apply_defaults()
    return list(bound.arguments.values())[1:]


def _pad(reference, fn, args, kwargs):
    """reference returning one tensor, padded with None to as many outputs as fn returns."""
    import torch
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.no_grad():
        out = fn.apply(*[a.to(device, copy=True) if isinstance(a, torch.Tensor) else a
                         for a in positional(fn, args, kwargs)])
    count = len(out) if isinstance(out, tuple) else 1

    def padded(*a, **k):
        value = reference(*a, **k)
        return value if count == 1 else (value, *([None] * (count - 1)))
    padded.__name__ = reference.__name__
    return padded


def _find(*paths):
    """The first of module:attr paths that imports (modules moved between releases)."""
    import importlib
    for path in paths:
        module, _, attr = path.partition(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError):
            continue
    raise ImportError(f"none of {paths} imports")


def ce_reference(_input, target, weight=None, ignore_index=-100, lse_square_scale=0.0, label_smoothing=0.0,
                 reduction="mean", *rest, **extra):
    import torch.nn.functional as F
    return F.cross_entropy(_input, target, weight=weight, ignore_index=ignore_index,
                           label_smoothing=label_smoothing, reduction=reduction)


def setup_liger_ce():
    fn = _find("liger_kernel.ops.cross_entropy:LigerCrossEntropyFunction")
    args, kwargs = (_randn(6, 40, seed=1), _targets(6, 40, seed=2), None), {"reduction": "none"}
    small = (_randn(3, 5, seed=3), _targets(3, 5, seed=4), None, -100, 0.0, 0.0, "none")
    return dict(fn=fn, args=args, kwargs=kwargs, reference=_pad(ce_reference, fn, args, kwargs), small=small,
                clone=True)


def flce_reference(_input, weight, target, bias=None, ce_weight=None, ignore_index=-100, lse_square_scale=0.0,
                   label_smoothing=0.0, reduction="mean", *rest, **extra):
    import torch.nn.functional as F
    return F.cross_entropy(F.linear(_input, weight, bias), target, weight=ce_weight, ignore_index=ignore_index,
                           label_smoothing=label_smoothing, reduction=reduction)


def setup_liger_flce(reduction="none"):
    fn = _find("liger_kernel.ops.fused_linear_cross_entropy:LigerFusedLinearCrossEntropyFunction")
    args = (_randn(6, 16, seed=1), _randn(40, 16, seed=2) * 0.3, _targets(6, 40, seed=3), _randn(40, seed=4))
    kwargs = {"reduction": reduction}
    small = (_randn(3, 4, seed=5), _randn(5, 4, seed=6), _targets(3, 5, seed=7), _randn(5, seed=8),
             None, -100, 0.0, 0.0, reduction)
    return dict(fn=fn, args=args, kwargs=kwargs, reference=_pad(flce_reference, fn, args, kwargs), small=small)


def conv_reference(x, weight=None, bias=None, residual=None, initial_state=None, output_final_state=False,
                   activation=None, *rest, **extra):
    """fla's causal_conv1d in torch: initial_state is (B, D, W), its slots 1..W-1 the W-1 tokens before x."""
    import torch
    import torch.nn.functional as F
    width = weight.shape[1]
    xt = x.transpose(1, 2)
    xt = F.pad(xt, (width - 1, 0)) if initial_state is None else torch.cat([initial_state[..., 1:], xt], dim=-1)
    y = F.conv1d(xt, weight.unsqueeze(1), bias, groups=weight.shape[0]).transpose(1, 2)
    y = F.silu(y) if activation in ("silu", "swish") else y
    return y if residual is None else y + residual


CONV_FUNCTION = ("fla.modules.conv.triton.ops:CausalConv1dFunction", "fla.modules.causal_conv1d.ops:CausalConv1dFunction")


def setup_fla_conv():
    fn = _find(*CONV_FUNCTION)
    args = (_randn(2, 24, 16, seed=1), _randn(16, 4, seed=2) * 0.5, _randn(16, seed=3))
    kwargs = {"activation": "silu"}
    small = (_randn(1, 5, 3, seed=4), _randn(3, 4, seed=5), _randn(3, seed=6), None, None, False, "silu")
    return dict(fn=fn, args=args, kwargs=kwargs, reference=_pad(conv_reference, fn, args, kwargs), small=small)


def setup_fla_conv_state():
    fn = _find(*CONV_FUNCTION)
    args = (_randn(2, 24, 16, seed=1), _randn(16, 4, seed=2) * 0.5, _randn(16, seed=3))
    kwargs = {"initial_state": _randn(2, 16, 4, seed=7), "activation": "silu"}
    small = (_randn(1, 5, 3, seed=4), _randn(3, 4, seed=5), _randn(3, seed=6), None, _randn(1, 3, 4, seed=8),
             False, "silu")
    return dict(fn=fn, args=args, kwargs=kwargs, reference=_pad(conv_reference, fn, args, kwargs), small=small)


def l2warp_reference(loss, logits, l2_penalty_factor=1e-4):
    """The loss unchanged, with the gradient L2Wrap means: factor * max logit at each row's argmax."""
    factor = l2_penalty_factor / (logits.shape[0] * logits.shape[1])
    penalty = (logits.max(dim=-1).values ** 2).sum() * (factor / 2)
    return loss + (penalty - penalty.detach())


def setup_fla_l2warp():
    import torch
    fn = _find("fla.modules.l2warp:L2Wrap")
    args = (torch.tensor(2.5), _randn(2, 6, 40, seed=1) * 3)
    small = (torch.tensor(2.5), _randn(1, 2, 5, seed=2))
    return dict(fn=fn, args=args, kwargs={}, reference=l2warp_reference, small=small)


def gelu_reference(input, bias):
    import torch.nn.functional as F
    return F.gelu(input + bias, approximate="tanh")


def setup_fla_gelu():
    fn = _find("fla.modules.activations:GeLUFunction")
    args = (_randn(24, 48, seed=1), _randn(48, seed=2))
    small = (_randn(3, 4, seed=3), _randn(4, seed=4))
    return dict(fn=fn, args=args, kwargs={}, reference=gelu_reference, small=small)


# ---------------------------------------------------------------------------
# The three tools, in the child
# ---------------------------------------------------------------------------

def load_checker():
    sys.path.insert(0, str(REPO / "practice"))
    from backward_checker import check_backward
    return check_backward


def run_checker(check_backward, fn, args, kwargs, reference, name):
    """The checker's verdict on the real Function called with its real args and kwargs."""
    started = time.perf_counter()
    try:
        report = check_backward(fn, *args, reference=reference, name=name, **kwargs)
    except Exception as error:  # the checker itself failed: say so, never a verdict
        return dict(traps=["checker error"], text=f"checker error: {type(error).__name__}: {error}", how="",
                    seconds=time.perf_counter() - started)
    return dict(traps=list(report.traps), text=str(report), how="the real Function and arguments",
                seconds=time.perf_counter() - started)


def run_gradcheck(fn, small, clone, fp32_inside):
    """gradcheck's verdict in float64 (and float32, loosely, where the kernels compute in fp32)."""
    import torch
    from torch.autograd.gradcheck import GradcheckError
    readings = []
    for dtype, tolerances in ((torch.float64, {}), (torch.float32, dict(eps=1e-3, atol=1e-2, rtol=1e-2))):
        if dtype == torch.float32 and not fp32_inside:
            break
        device = "cuda" if torch.cuda.is_available() else "cpu"
        values = [v.to(device, dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else
                  v.to(device) if isinstance(v, torch.Tensor) else v for v in small]
        where = [i for i, v in enumerate(values) if isinstance(v, torch.Tensor) and v.is_floating_point()]
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
    """Every Triton autotuner keeps only its first config, so a kernel compiles once for each shape instead
    of once for each config and shape (fla-core autotunes for every shape the checker draws). The
    verdicts are about strides, grids and formulas, which every config must get right."""
    import triton.runtime.autotuner as autotuner
    original = autotuner.Autotuner.__init__

    def first_config_only(self, fn, arg_names, configs=None, *args, **kwargs):
        return original(self, fn, arg_names, list(configs)[:1], *args, **kwargs)
    autotuner.Autotuner.__init__ = first_config_only


def child(case_name, site):
    """Runs in a fresh interpreter with only the release's folder added to the path."""
    import importlib.metadata
    check_backward = load_checker()  # first: it picks the backend before anything imports triton
    if os.environ.get(PIN_VARIABLE) == "1":
        pin_autotune()
    case = next(c for c in CASES if c.name == case_name) if case_name != "sweep" else None
    dist = case.dist if case else SWEEP_RELEASE[0]
    version = importlib.metadata.version(dist)
    located = str(importlib.metadata.distribution(dist).locate_file(""))
    if not located.startswith(str(Path(site).resolve())):
        raise SystemExit(f"{dist} {version} came from {located}, not from {site}")
    if case is None:
        result = dict(version=version, findings=sweep(check_backward), probes=sweep_probes())
    else:
        call = globals()[case.setup]()
        checker = run_checker(check_backward, call["fn"], call["args"], call["kwargs"], call["reference"],
                              f"{call['fn'].__name__} ({dist} {version})")
        result = dict(version=version, checker=checker,
                      gradcheck=run_gradcheck(call["fn"], call["small"], call.get("clone", False), case.fp32_inside),
                      opcheck=run_opcheck(call["fn"], call["args"], call["kwargs"]))
    result["site"] = located
    result["interpreted"] = os.environ.get("TRITON_INTERPRET") == "1"
    print(RESULT_MARK + json.dumps(result), flush=True)


# ---------------------------------------------------------------------------
# The sweep: a current Liger-Kernel release's public Functions, with torch references
# ---------------------------------------------------------------------------

def rms_reference(X, W, eps, offset=0.0, *rest, **extra):
    import torch
    return X * torch.rsqrt(X.pow(2).mean(-1, keepdim=True) + eps) * (offset + W)


def fused_add_rms_reference(X, R, W, eps, offset=0.0, *rest, **extra):
    S = X + R
    return rms_reference(S, W, eps, offset), S


def sweep_calls():
    """(label, Function, args, kwargs, reference) for each swept Function. References follow the
    library's documented semantics at these arguments (tanh GELU for GEGLU, 'llama' casting)."""
    import torch
    import torch.nn.functional as F
    ops = "liger_kernel.ops."
    x, y = _randn(6, 40, seed=1), _randn(6, 40, seed=2)
    probs = torch.softmax(_randn(6, 40, seed=3), -1)
    calls = [
        ("cross entropy", _find(ops + "cross_entropy:LigerCrossEntropyFunction"),
         (x, _targets(6, 40, seed=4), None), {}, ce_reference),
        ("fused linear cross entropy", _find(ops + "fused_linear_cross_entropy:LigerFusedLinearCrossEntropyFunction"),
         (_randn(6, 16, seed=5), _randn(40, 16, seed=6) * 0.3, _targets(6, 40, seed=7), _randn(40, seed=8)), {},
         flce_reference),
        ("RMSNorm", _find(ops + "rms_norm:LigerRMSNormFunction"), (x, _randn(40, seed=9), 1e-6), {}, rms_reference),
        ("fused add + RMSNorm", _find(ops + "fused_add_rms_norm:LigerFusedAddRMSNormFunction"),
         (x, y, _randn(40, seed=9), 1e-6), {}, fused_add_rms_reference),
        ("LayerNorm", _find(ops + "layer_norm:LigerLayerNormFunction"), (x, _randn(40, seed=9), _randn(40, seed=10),
         1e-6), {}, lambda X, W, B, eps: F.layer_norm(X, X.shape[-1:], W, B, eps)),
        ("SwiGLU", _find(ops + "swiglu:LigerSiLUMulFunction"), (x, y), {}, lambda a, b, *r, **k: F.silu(a) * b),
        ("GEGLU", _find(ops + "geglu:LigerGELUMulFunction"), (x, y), {},
         lambda a, b: F.gelu(a, approximate="tanh") * b),
        ("softmax", _find(ops + "softmax:LigerSoftmaxFunction"), (x,), {}, lambda input_: torch.softmax(input_, -1)),
        ("DyT", _find(ops + "dyt:LigerDyTFunction"), (x, torch.tensor([0.5]), _randn(40, seed=11), _randn(40, seed=12)),
         {}, lambda x, alpha, gamma, beta: gamma * torch.tanh(alpha * x) + beta),
        # y_true is the target distribution: the library takes no gradient for it, so it is the
        # library's to keep fixed (no_grad), not the checker's to differentiate.
        ("KL divergence", _find(ops + "kl_div:LigerKLDivLossFunction"),
         (torch.log_softmax(_randn(6, 40, seed=13), -1), probs), {"no_grad": ("y_true",)},
         lambda y_pred, y_true, reduction="batchmean", log_target=False, eps=1e-10:
         F.kl_div(y_pred, y_true, reduction=reduction, log_target=log_target)),
        ("GroupNorm", _find(ops + "group_norm:LigerGroupNormFunction"),
         (_randn(3, 6, 20, seed=14), _randn(6, seed=15), _randn(6, seed=16), 6, 2, 1e-6), {},
         lambda X, w, b, num_channels, num_groups, eps: F.group_norm(X, num_groups, w, b, eps)),
    ]
    out = []
    for label, fn, args, kwargs, reference in calls:
        out.append((label, fn, args, kwargs, _pad(reference, fn, args, kwargs) if "entropy" in label else reference))
    return out


def sweep(check_backward):
    findings = []
    for label, fn, args, kwargs, reference in sweep_calls():
        result = run_checker(check_backward, fn, args, kwargs, reference, f"{fn.__name__}")
        findings.append(dict(label=label, function=fn.__name__, **result))
    return findings


def sweep_probes():
    """Each flag of the sweep provoked by hand, without the checker: (Function, what the probe does, what it
    saw, whether the trap showed). A flag is real where its probe shows it."""
    import torch
    import torch.nn.functional as F
    ops = "liger_kernel.ops."
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x, target = _randn(6, 40, seed=1).to(device), _targets(6, 40, seed=4).to(device)
    g = _randn(6, 40, seed=21).to(device)

    def transposed_logits():
        ce = _find(ops + "cross_entropy:LigerCrossEntropyFunction")

        def grad(transposed):
            leaf = (x.t().contiguous().t() if transposed else x.clone()).requires_grad_(True)
            passed = leaf.t().contiguous().t() if transposed else leaf.clone()  # a non-leaf, laid out as leaf
            out = ce.apply(passed, target, None)
            return torch.autograd.grad(out[0] if isinstance(out, tuple) else out, leaf)[0]
        right, transposed = grad(False), grad(True)
        off = ((transposed - right).norm() / right.norm()).item()
        return (f"the gradient for logits laid out transposed (the same values) is {off:.3g} (relative) off the "
                f"contiguous one", off > 1e-3)

    def frozen_hidden_states():
        flce = _find(ops + "fused_linear_cross_entropy:LigerFusedLinearCrossEntropyFunction")
        hidden, weight = _randn(6, 16, seed=5).to(device), (_randn(40, 16, seed=6) * 0.3).to(device)
        bias, labels = _randn(40, seed=8).to(device), _targets(6, 40, seed=7).to(device)
        w, w_ref = weight.clone().requires_grad_(True), weight.clone().requires_grad_(True)
        out = flce.apply(hidden, w, labels, bias)
        (out[0] if isinstance(out, tuple) else out).backward()
        F.cross_entropy(F.linear(hidden, w_ref, bias), labels).backward()
        return (f"with the hidden states frozen and the weight trained, weight.grad is "
                f"{'None' if w.grad is None else 'set'}; torch's has norm {w_ref.grad.norm().item():.3g}",
                w.grad is None)

    def grad_output_written():
        rms = _find(ops + "rms_norm:LigerRMSNormFunction")
        leaf, kept = x.clone().requires_grad_(True), g.clone()
        torch.autograd.grad(rms.apply(leaf, _randn(40, seed=9).to(device), 1e-6), leaf, g)
        changed = (g - kept).abs().max().item()
        return f"grad_output changed during the backward by up to {changed:.3g}", changed > 0

    def input_written():
        swiglu = _find(ops + "swiglu:LigerSiLUMulFunction")
        a, b = x.clone().requires_grad_(True), _randn(6, 40, seed=2).to(device).requires_grad_(True)
        passed = a.clone()
        before = passed.detach().clone()
        torch.autograd.grad(swiglu.apply(passed, b.clone()), [a, b], g)
        changed = (passed.detach() - before).abs().max().item()
        return f"its input changed during the backward by up to {changed:.3g}", changed > 0

    probes = []
    for function, probe in (("LigerCrossEntropyFunction", transposed_logits),
                            ("LigerFusedLinearCrossEntropyFunction", frozen_hidden_states),
                            ("LigerRMSNormFunction", grad_output_written), ("LigerSiLUMulFunction", input_written)):
        try:
            saw, shown = probe()
        except Exception as error:  # noqa: BLE001  (a probe that cannot run shows nothing)
            saw, shown = f"the probe raised {type(error).__name__}: {' '.join(str(error).split())[:120]}", False
        probes.append((function, saw, shown))
    return probes


# ---------------------------------------------------------------------------
# The parent: wheels, folders, subprocesses, the table
# ---------------------------------------------------------------------------

def wheel_for(wheels, dist, version):
    found = sorted(wheels.glob(f"{dist.replace('-', '_')}-{version}-*.whl"))
    return found[0] if found else None


def releases():
    pairs = [(c.dist, v) for c in CASES for v in (c.buggy, c.fixed)] + [SWEEP_RELEASE]
    return list(dict.fromkeys(pairs))


def download(wheels):
    wheels.mkdir(parents=True, exist_ok=True)
    wanted = [f"{d}=={v}" for d, v in releases()] + sorted({w for ws in EXTRA_WHEELS.values() for w in ws})
    for spec in wanted:  # one at a time: pip refuses two versions of one name in one call
        command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                   *PLATFORM_PINS, "-d", str(wheels), spec]
        if subprocess.run(command).returncode != 0:
            print(f"in_the_wild: could not download {spec}", file=sys.stderr)
            return 2
    print(f"{len(wanted)} wheels in {wheels}")
    return 0


def install(wheels, dist, version, root):
    """The release's wheel (and any pure-Python need missing here) into a folder of its own."""
    import importlib.util
    target = Path(root) / f"{dist}-{version}"
    files = [wheel_for(wheels, dist, version)]
    for need in EXTRA_WHEELS.get(dist, []):
        name, _, pinned = need.partition("==")
        if importlib.util.find_spec(name) is None:
            files.append(wheel_for(wheels, name, pinned))
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
               "--disable-pip-version-check", "--target", str(target), *map(str, files)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"pip could not install {dist} {version}: {done.stderr.strip()[-300:]}")
    return target


def run_child(case_name, site, interpret, timeout, pinned=False):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(REPO)]), PYTHONUNBUFFERED="1")
    env[PIN_VARIABLE] = "1" if pinned else "0"
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    command = [sys.executable, str(Path(__file__).resolve()), "--child", case_name, "--site", str(site)]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict(error=f"timed out after {timeout} s")
    for line in done.stdout.splitlines():
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK):])
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
    sys.path.insert(0, str(REPO / "tools"))
    from stamp import lines
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (Triton interpreter)"
    autotune = ("each autotuned kernel pinned to its first config (--pin-autotune: every shape compiles once)"
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


def table(rows):
    heads = ("case", "release", "checker (traps)", "gradcheck", "opcheck", "verdict")
    widths = [max(len(heads[i]), *(len(r[i]) for r in rows)) for i in range(len(heads))]
    lines = [" | ".join(h.ljust(w) for h, w in zip(heads, widths)), "-+-".join("-" * w for w in widths)]
    lines += [" | ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


def run_release(case, version, wheels, root, interpret, timeout, pinned):
    try:
        return run_child(case.name, install(wheels, case.dist, version, root), interpret, timeout, pinned)
    except RuntimeError as error:
        return dict(error=str(error))


def run_cases(cases, wheels, interpret, jobs, timeout, pinned):
    """Every release of every case, each in its own subprocess (jobs at a time), reported in order."""
    import concurrent.futures
    rows, everything_expected = [], True
    with tempfile.TemporaryDirectory(prefix="in_the_wild_") as root, \
            concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        pending = {(c.name, v): pool.submit(run_release, c, v, wheels, root, interpret, timeout, pinned)
                   for c in cases for v in (c.buggy, c.fixed)}
        for case in cases:
            print(f"\n== {case.name}: {case.dist} {case.buggy} -> {case.fixed}, {case.trap_class}")
            print("   " + " ".join(case.links))
            for role, version in (("buggy", case.buggy), ("fixed", case.fixed)):
                result = pending[(case.name, version)].result()
                verdict = judge(case, role, result)
                everything_expected &= verdict == "as expected"
                if "error" in result:
                    print(f"-- {version} ({role}): {result['error']}")
                    rows.append((case.name, f"{version} {role}", "error", "-", "-", verdict))
                    continue
                checker = result["checker"]
                print(f"-- {case.dist} {version} ({role}), checked with {checker['how']} "
                      f"in {checker['seconds']:.1f} s:")
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
    print("\n" + table(rows))
    return everything_expected


def sweep_result(wheels, interpret, timeout, pinned):
    dist, version = SWEEP_RELEASE
    with tempfile.TemporaryDirectory(prefix="in_the_wild_") as root:
        try:
            return run_child("sweep", install(wheels, dist, version, root), interpret, timeout, pinned)
        except RuntimeError as error:
            return dict(error=str(error))


def print_sweep(result):
    dist, version = SWEEP_RELEASE
    if "error" in result:
        print(f"sweep of {dist} {version}: {result['error']}")
        return False
    print(f"\n== sweep: {dist} {result['version']}, each public Function against a torch reference")
    rows = []
    for f in result["findings"]:
        print(f"-- {f['label']} ({f['function']}), checked with {f['how']} in {f['seconds']:.1f} s:")
        print("\n".join("   " + line for line in f["text"].splitlines()))
        rows.append((f["label"], f["function"], ", ".join(f["traps"]) or "clean"))
    heads = ("op", "Function", "checker (traps)")
    widths = [max(len(heads[i]), *(len(r[i]) for r in rows)) for i in range(3)]
    print("\n" + " | ".join(h.ljust(w) for h, w in zip(heads, widths)))
    print("-+-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(v.ljust(w) for v, w in zip(r, widths)))
    print("\n-- each flag provoked by hand, without the checker:")
    for function, saw, shown in result.get("probes", []):
        print(f"   {function}: {saw}: {'the trap shows' if shown else 'NOT shown'}")
    return True


def main(argv=None):
    parser = argparse.ArgumentParser(description="Run the chapter's traps on real libraries' buggy and fixed "
                                                 "releases (needs a CUDA GPU).")
    parser.add_argument("--wheels", type=Path, default=DEFAULT_WHEELS, help="folder of the releases' wheels")
    parser.add_argument("--case", action="append", choices=[c.name for c in CASES], help="run only this case")
    parser.add_argument("--sweep", action="store_true", help="also sweep a current Liger-Kernel release")
    parser.add_argument("--sweep-only", action="store_true", help="only the sweep")
    parser.add_argument("--download", action="store_true", help="download the wheels into --wheels and stop")
    parser.add_argument("--list", action="store_true", help="list the cases and stop")
    parser.add_argument("--interpret", action="store_true",
                        help="without a GPU, run in Triton's interpreter anyway (no evidence: exits 2)")
    parser.add_argument("--jobs", type=int, default=1, help="releases checked at once (default 1)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds one release may take (default 600)")
    parser.add_argument("--pin-autotune", action="store_true",
                        help="keep each autotuned kernel's first config only, so every shape compiles once")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--site", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.site)
        return 0
    if args.jobs < 1 or args.timeout < 1:
        parser.error("--jobs and --timeout take a positive number")
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
    cases = [c for c in CASES if not args.case or c.name in args.case]
    wanted = [] if args.sweep_only else [(c.dist, v) for c in cases for v in (c.buggy, c.fixed)]
    wanted += [SWEEP_RELEASE] if args.sweep or args.sweep_only else []
    missing = [f"{d} {v}" for d, v in wanted if wheel_for(args.wheels, d, v) is None]
    if missing:
        print(f"in_the_wild: no wheel in {args.wheels} for {', '.join(missing)} (run with --download where "
              "there is a network)", file=sys.stderr)
        return 2
    print("\n".join(header(args.pin_autotune)))
    if args.interpret and not torch.cuda.is_available():
        print("INTERPRETED: Triton's interpreter on the CPU; these verdicts are not evidence")
    import concurrent.futures
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as beside:  # the sweep runs beside the cases
        sweeping = beside.submit(sweep_result, args.wheels, args.interpret, args.timeout, args.pin_autotune) \
            if args.sweep or args.sweep_only else None
        ok = True if args.sweep_only else run_cases(cases, args.wheels, args.interpret, args.jobs, args.timeout,
                                                     args.pin_autotune)
        if sweeping is not None:
            ok = print_sweep(sweeping.result()) and ok
    if args.interpret and not torch.cuda.is_available():
        return 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
