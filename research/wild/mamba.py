"""mamba-ssm (state-spaces/mamba): PyPI ships only an sdist that builds CUDA extensions (selective scan,
with causal-conv1d beside it), so its Triton ops are loaded by vendoring only their files (see
common.VENDORED): mamba_ssm/ops/triton/ (layer norm, gated RMSNorm, the SSD chunked scan and its kernels)
and the two small helpers under mamba_ssm/utils/ that recent releases import, each byte for byte from the
release's sdist. ssd_combined.py imports causal_conv1d inside try/except, and only
MambaSplitConv1dScanCombinedFn needs it; it is not called here."""
from wild.common import Case, Sweep, device as common_device, find, randn

EXTRA_WHEELS = ["einops==0.8.1"]  # pure-Python needs (the SSD kernels import einops), installed only where missing

SSD = tuple("mamba_ssm/ops/triton/" + name for name in (
    "ssd_combined.py", "ssd_bmm.py", "ssd_chunk_state.py", "ssd_state_passing.py", "ssd_chunk_scan.py",
    "layernorm_gated.py", "k_activations.py", "softplus.py"))
# Since 2.2.5/2.3.0 the kernels import these two; both import only torch, triton and packaging, and
# mamba_ssm/utils/__init__.py is empty in the release.
UTILS = ("mamba_ssm/utils/torch.py", "mamba_ssm/utils/determinism.py")
LAYER_NORM = ("mamba_ssm/ops/triton/layer_norm.py",)

# Shown since the checker lays inputs out as padded views (x[::2] for one dim): the forward makes a strided D
# contiguous for itself, and the backward asserts D.stride(-1) == 1 on the D it saved (the line linked). No
# issue is filed; the sweep's probe (sweep_probes) provokes it on the current release.
KNOWN_STRIDED_D = ("assumes a contiguous input",
                   "https://github.com/state-spaces/mamba/blob/v2.2.1/mamba_ssm/ops/triton/ssd_combined.py#L234")

CASES = (
    Case("mamba-ssd-gradient-count", "mamba-ssm", "2.2.0", "2.2.1",
         ("https://github.com/state-spaces/mamba/issues/431",
          "https://github.com/state-spaces/mamba/commit/ddce0c1334536dd04c523ccce08928f3611d2627"),
         "one gradient per input (Chapter 15)", "returns the wrong gradients",
         "2.2.0 added two arguments to MambaChunkScanCombinedFn.forward (cu_seqlens, return_varlen_states: 16 "
         "inputs) but left backward returning 14 values, so every backward through mamba_chunk_scan_combined "
         "raised 'returned an incorrect number of gradients (expected 16, got 14)'. The kernel tests call "
         "the chunk kernels and the forward directly, and the Mamba2 module's default path "
         "(use_mem_eff_path=True) goes through MambaSplitConv1dScanCombinedFn instead.",
         "setup_ssd", vendored=SSD, known=(KNOWN_STRIDED_D,)),
)

SWEEP = Sweep("mamba-ssm", "2.3.2.post1", vendored=SSD + UTILS + LAYER_NORM,
              loaded="its Triton op files vendored from the sdist (the sdist builds CUDA extensions)")


# ---------------------------------------------------------------------------
# References (plain torch, the Functions' documented semantics)
# ---------------------------------------------------------------------------

def ssd_reference(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None, initial_states=None, seq_idx=None,
                  cu_seqlens=None, dt_softplus=False, dt_limit=(0.0, float("inf")), return_final_states=False,
                  return_varlen_states=False):
    """The SSD recurrence step by step (chunk_size changes only how the kernels compute it):
    dt' = clamp(softplus(dt + dt_bias), *dt_limit), h_t = exp(dt'_t A) h_{t-1} + dt'_t x_t B_t^T, y_t = h_t C_t + D x_t,
    out = y * silu(z). x (b, l, h, p), dt (b, l, h), A (h,), B and C (b, l, g, n) shared by h / g heads;
    h_0 = initial_states (b, h, p, n) or zeros; with return_final_states also h_L."""
    import torch
    import torch.nn.functional as F
    batch, seqlen, nheads, headdim = x.shape
    groups, dstate = B.shape[2], B.shape[3]
    if dt_bias is not None:
        dt = dt + dt_bias
    if dt_softplus:
        dt = F.softplus(dt)
    dt = dt.clamp(dt_limit[0], dt_limit[1])  # the kernels clamp always, to [0, inf) by default
    Bh = B.repeat_interleave(nheads // groups, dim=2)
    Ch = C.repeat_interleave(nheads // groups, dim=2)
    state = (x.new_zeros(batch, nheads, headdim, dstate) if initial_states is None else initial_states)
    ys = []
    for t in range(seqlen):
        decay = torch.exp(dt[:, t] * A)                                        # (b, h)
        state = state * decay[:, :, None, None] + (dt[:, t, :, None, None] * x[:, t, :, :, None]
                                                    * Bh[:, t, :, None, :])
        ys.append(torch.einsum("bhpn,bhn->bhp", state, Ch[:, t]))
    y = torch.stack(ys, dim=1)
    if D is not None:
        y = y + x * (D[:, None] if D.dim() == 1 else D)
    if z is not None:
        y = y * F.silu(z)
    return (y, state) if return_final_states else y


def gated_norm_reference(x, weight, bias, z=None, eps=1e-6, group_size=None, norm_before_gate=True,
                         is_rms_norm=False):
    """norm(x) * silu(z) if norm_before_gate, else norm(x * silu(z)); with group_size, each group of
    group_size features normalised on its own (GroupNorm), then weight and bias over all features."""
    import torch
    import torch.nn.functional as F
    if z is not None and not norm_before_gate:
        x = x * F.silu(z)
    size = x.shape[-1] if group_size is None else group_size
    grouped = x.unflatten(-1, (-1, size))
    if is_rms_norm:
        normed = grouped * torch.rsqrt(grouped.pow(2).mean(-1, keepdim=True) + eps)
    else:
        centred = grouped - grouped.mean(-1, keepdim=True)
        normed = centred * torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + eps)
    y = normed.flatten(-2) * weight
    y = y if bias is None else y + bias
    if z is not None and norm_before_gate:
        y = y * F.silu(z)
    return y


def layer_norm_reference(x, weight, bias, residual=None, x1=None, weight1=None, bias1=None, eps=1e-6,
                         dropout_p=0.0, rowscale=None, prenorm=False, residual_in_fp32=False, is_rms_norm=False,
                         *rest, **extra):
    """mamba's LayerNormFn without dropout, rowscale or a parallel branch: norm(x + residual), and with
    prenorm also x + residual (the residual stream the next block adds to)."""
    import torch
    import torch.nn.functional as F
    summed = x if residual is None else x + residual
    if is_rms_norm:
        y = summed * torch.rsqrt(summed.pow(2).mean(-1, keepdim=True) + eps) * weight
        y = y if bias is None else y + bias
    else:
        y = F.layer_norm(summed, summed.shape[-1:], weight, bias, eps)
    return (y, summed) if prenorm else y


def ssd_inputs(seed, batch=1, seqlen=32, nheads=2, headdim=8, groups=1, dstate=8):
    """x, dt, A, B, C for the SSD scan: dt around softplus's working range, A negative (decay < 1)."""
    import torch
    x = randn(batch, seqlen, nheads, headdim, seed=seed)
    dt = randn(batch, seqlen, nheads, seed=seed + 1) * 0.5 - 1.0
    A = -torch.exp(randn(nheads, seed=seed + 2) * 0.3)
    B = randn(batch, seqlen, groups, dstate, seed=seed + 3) * 0.5
    C = randn(batch, seqlen, groups, dstate, seed=seed + 4) * 0.5
    return x, dt, A, B, C


# ---------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------

def setup_ssd():
    fn = find("mamba_ssm.ops.triton.ssd_combined:MambaChunkScanCombinedFn")
    x, dt, A, B, C = ssd_inputs(seed=1)
    args = (x, dt, A, B, C, 16)
    kwargs = {"D": randn(2, seed=9), "dt_bias": randn(2, seed=10) * 0.1, "dt_softplus": True}
    sx, sdt, sA, sB, sC = ssd_inputs(seed=20, seqlen=4, nheads=1, headdim=2, dstate=2)
    small = (sx, sdt, sA, sB, sC, 4, randn(1, seed=30), None, randn(1, seed=31) * 0.1, None, None, None, True)
    return dict(fn=fn, args=args, kwargs=kwargs, reference=ssd_reference, small=small)


# ---------------------------------------------------------------------------
# The sweep of the current release
# ---------------------------------------------------------------------------

def sweep_calls():
    """(label, Function, args, kwargs, reference) for each swept Function."""
    ssd = find("mamba_ssm.ops.triton.ssd_combined:MambaChunkScanCombinedFn")
    gated = find("mamba_ssm.ops.triton.layernorm_gated:LayerNormFn")
    ln = find("mamba_ssm.ops.triton.layer_norm:LayerNormFn")
    x, dt, A, B, C = ssd_inputs(seed=1, groups=1)
    h = randn(6, 48, seed=11)
    w, b = 1 + 0.1 * randn(48, seed=12), 0.1 * randn(48, seed=13)
    return [
        ("SSD chunk scan (D, z, dt_bias, softplus)", ssd, (x, dt, A, B, C, 16),
         {"D": randn(2, seed=9), "z": randn(1, 32, 2, 8, seed=8), "dt_bias": randn(2, seed=10) * 0.1,
          "dt_softplus": True}, ssd_reference),
        ("SSD chunk scan (initial and final states)", ssd, (x, dt, A, B, C, 16),
         {"initial_states": randn(1, 2, 8, 8, seed=14) * 0.5, "dt_softplus": True, "return_final_states": True},
         ssd_reference),
        ("gated RMSNorm (norm before gate, 2 groups)", gated, (h, w, None),
         {"z": randn(6, 48, seed=15), "group_size": 24, "is_rms_norm": True}, gated_norm_reference),
        ("gated LayerNorm (gate before norm)", gated, (h, w, b),
         {"z": randn(6, 48, seed=15), "norm_before_gate": False}, gated_norm_reference),
        ("LayerNorm + residual (prenorm)", ln, (h, w, b), {"residual": randn(6, 48, seed=16), "prenorm": True},
         layer_norm_reference),
        ("RMSNorm", ln, (h, w, None), {"is_rms_norm": True}, layer_norm_reference),
    ]


def sweep_probes():
    """Each flag of the sweep provoked by hand, without the checker: (Function, what the probe saw, shown).
    A flag is real where its probe shows it."""
    import torch
    device = common_device()
    ssd = find("mamba_ssm.ops.triton.ssd_combined:MambaChunkScanCombinedFn")
    x, dt, A, B, C = (t.to(device) for t in ssd_inputs(seed=1, groups=1))
    dt_bias = (randn(2, seed=10) * 0.1).to(device)

    def strided_d():
        # D, one value a head, as a view of every other element of a longer tensor (stride 2): the forward
        # takes it, and the backward, called as autograd calls it, raises for it (contiguous, it runs)
        def backward_with(d):
            leaves = [t.clone().requires_grad_(True) for t in (x, dt, A, B, C)]
            out = ssd.apply(*leaves, 16, d, None, dt_bias, None, None, None, True)
            out = out[0] if isinstance(out, tuple) else out
            torch.autograd.grad(out, leaves, randn(*out.shape, seed=12).to(device))  # a random grad_output, not ones
        wider = randn(4, seed=9).to(device).requires_grad_(True)
        backward_with(wider.detach()[::2].contiguous().requires_grad_(True))
        try:
            backward_with(wider[::2])
        except Exception as error:  # noqa: BLE001  (the trap: the backward's raise, which the probe words)
            return (f"with D = d[::2] (stride {wider[::2].stride(0)}) the forward runs and the backward raises "
                    f"{type(error).__name__}: {' '.join(str(error).split())[:80]}; with D contiguous it runs", True)
        return "with D = d[::2] the forward and the backward both run", False

    probes = []
    for function, probe in (("MambaChunkScanCombinedFn", strided_d),):
        try:
            saw, shown = probe()
        except Exception as error:  # noqa: BLE001  (a probe that cannot run shows nothing)
            saw, shown = f"the probe raised {type(error).__name__}: {' '.join(str(error).split())[:120]}", False
        probes.append((function, saw, shown))
    return probes
