"""Triton kernels of the operators (CUDA, and CPU tensors under Triton's interpreter).

Each kernel is a plain Python function turned into a Triton kernel at launch:
``triton.jit`` for CUDA tensors, and for CPU tensors the interpreter's ``InterpretedFunction``
(whatever ``TRITON_INTERPRET`` said when Triton was imported), so that tests run on a CPU
exactly the code a GPU compiles. Kernels therefore call only Triton *builtins*
(``tl.load``, ``tl.exp``, ``tl.dot``, ``tl.reduce``, ...): the ``@triton.jit`` helpers of
Triton's standard library (``tl.sum``, ``tl.max``, ``tl.zeros``, ``tl.sigmoid``, ...) are
compiled-only objects unless the interpreter was switched on at import; reductions go through
``tl.reduce`` with the standard library's combine functions instead, which the interpreter
evaluates with numpy. ``tests/ops/test_ops.py`` checks this rule on the source.

Written for Triton 3.6 and later (nothing newer is used). This module imports Triton; import
it only where Triton is available (:func:`pyg_lie.ops._backend.triton_available`).
"""
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

import torch

# combine functions of tl.sum / tl.max; the interpreter maps them to numpy reductions
_SUM = tl.standard._sum_combine
_MAX = tl.standard._elementwise_max

_variants = {}


def _launch(fn, grid, device: torch.device, *args, **meta) -> None:
    """Run kernel ``fn`` on ``grid``: compiled for CUDA tensors, interpreted for CPU tensors."""
    interpret = device.type != "cuda"
    key = (fn, interpret)
    kernel = _variants.get(key)
    if kernel is None:
        kernel = _variants[key] = InterpretedFunction(fn) if interpret else triton.jit(fn)
    if interpret:
        kernel[grid](*args, **meta)
    else:
        with torch.cuda.device(device):
            kernel[grid](*args, **meta)


def acc_dtype(dtype: torch.dtype):
    """The kernels' accumulation type: float64 for float64 data, float32 otherwise."""
    return tl.float64 if dtype == torch.float64 else tl.float32


def _pow2(n: int, low: int = 1) -> int:
    return max(low, triton.next_power_of_2(max(int(n), 1)))


# ------------------------------------------------------------------ fused CSR softmax attention
def _attn_fwd(q_ptr, k_ptr, v_ptr, l_ptr, b_ptr, crow_ptr, col_ptr, out_ptr, w_ptr, E, H, D,
              HAS_L: tl.constexpr, HAS_B: tl.constexpr, B_PER_HEAD: tl.constexpr, ACC: tl.constexpr,
              BLOCK_E: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr):
    # one program per target row i and block of heads; online softmax over the row's edges
    i = tl.program_id(0)
    hs = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    ds = tl.arange(0, BLOCK_D)
    hmask = hs < H
    hd = hs[:, None] * D + ds[None, :]
    hdmask = hmask[:, None] & (ds[None, :] < D)
    HD = H * D
    row = i.to(tl.int64) * HD
    qi = tl.load(q_ptr + row + hd, mask=hdmask, other=0.0).to(ACC)
    start = tl.load(crow_ptr + i).to(tl.int64)
    end = tl.load(crow_ptr + i + 1).to(tl.int64)
    hE = hs.to(tl.int64)[None, :] * E
    m = tl.full([BLOCK_H], float("-inf"), ACC)
    z = tl.full([BLOCK_H], 0.0, ACC)
    acc = tl.full([BLOCK_H, BLOCK_D], 0.0, ACC)
    for e0 in range(start, end, BLOCK_E):
        es = e0 + tl.arange(0, BLOCK_E)
        emask = es < end
        j = tl.load(col_ptr + es, mask=emask, other=0).to(tl.int64)
        m3 = emask[:, None, None] & hdmask[None, :, :]
        src = j[:, None, None] * HD + hd[None, :, :]
        kj = tl.load(k_ptr + src, mask=m3, other=0.0).to(ACC)
        s = tl.reduce(qi[None, :, :] * kj, 2, _SUM)
        eh = emask[:, None] & hmask[None, :]
        woff = hE + es[:, None]
        if HAS_L:
            s += tl.load(l_ptr + woff, mask=eh, other=0.0).to(ACC)
        if HAS_B:
            if B_PER_HEAD:
                s += tl.load(b_ptr + woff, mask=eh, other=0.0).to(ACC)
            else:
                s += tl.load(b_ptr + es, mask=emask, other=0.0).to(ACC)[:, None]
        s = tl.where(eh, s, float("-inf"))
        tl.store(w_ptr + woff, s, mask=eh)  # raw scores; normalised below
        m_new = tl.maximum(m, tl.reduce(s, 0, _MAX))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows (so far) without a finite score
        alpha = tl.exp(m - shift)
        p = tl.exp(s - shift[None, :])
        z = z * alpha + tl.reduce(p, 0, _SUM)
        vj = tl.load(v_ptr + src, mask=m3, other=0.0).to(ACC)
        acc = acc * alpha[:, None] + tl.reduce(p[:, :, None] * vj, 0, _SUM)
        m = m_new
    shift = tl.where(m == float("-inf"), 0.0, m)
    inv = tl.where(z > 0, 1.0 / tl.where(z > 0, z, 1.0), 0.0)
    tl.store(out_ptr + row + hd, acc * inv[:, None], mask=hdmask)
    tl.debug_barrier()  # the raw scores written above by other threads of this program
    for e0 in range(start, end, BLOCK_E):
        es = e0 + tl.arange(0, BLOCK_E)
        eh = (es < end)[:, None] & hmask[None, :]
        woff = hE + es[:, None]
        s = tl.load(w_ptr + woff, mask=eh, other=float("-inf"))
        tl.store(w_ptr + woff, tl.exp(s - shift[None, :]) * inv[None, :], mask=eh)


def _attn_bwd_rows(k_ptr, v_ptr, w_ptr, g_ptr, gw_ptr, crow_ptr, col_ptr, ds_ptr, gq_ptr, E, H, D,
                   HAS_GW: tl.constexpr, ACC: tl.constexpr,
                   BLOCK_E: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr):
    # per target row i: dw_e = g_i . v_j (+ gw_e), ds_e = w_e (dw_e - sum_e' w_e' dw_e'),
    # gq_i = sum_e ds_e k_j; ds goes to ds_ptr for the column pass
    i = tl.program_id(0)
    hs = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    ds = tl.arange(0, BLOCK_D)
    hmask = hs < H
    hd = hs[:, None] * D + ds[None, :]
    hdmask = hmask[:, None] & (ds[None, :] < D)
    HD = H * D
    row = i.to(tl.int64) * HD
    gi = tl.load(g_ptr + row + hd, mask=hdmask, other=0.0).to(ACC)
    start = tl.load(crow_ptr + i).to(tl.int64)
    end = tl.load(crow_ptr + i + 1).to(tl.int64)
    hE = hs.to(tl.int64)[None, :] * E
    delta = tl.full([BLOCK_H], 0.0, ACC)
    for e0 in range(start, end, BLOCK_E):
        es = e0 + tl.arange(0, BLOCK_E)
        emask = es < end
        j = tl.load(col_ptr + es, mask=emask, other=0).to(tl.int64)
        m3 = emask[:, None, None] & hdmask[None, :, :]
        vj = tl.load(v_ptr + j[:, None, None] * HD + hd[None, :, :], mask=m3, other=0.0).to(ACC)
        dw = tl.reduce(gi[None, :, :] * vj, 2, _SUM)
        eh = emask[:, None] & hmask[None, :]
        woff = hE + es[:, None]
        if HAS_GW:
            dw += tl.load(gw_ptr + woff, mask=eh, other=0.0).to(ACC)
        wv = tl.load(w_ptr + woff, mask=eh, other=0.0).to(ACC)
        delta += tl.reduce(wv * dw, 0, _SUM)
        tl.store(ds_ptr + woff, dw, mask=eh)
    tl.debug_barrier()
    gq = tl.full([BLOCK_H, BLOCK_D], 0.0, ACC)
    for e0 in range(start, end, BLOCK_E):
        es = e0 + tl.arange(0, BLOCK_E)
        emask = es < end
        j = tl.load(col_ptr + es, mask=emask, other=0).to(tl.int64)
        eh = emask[:, None] & hmask[None, :]
        woff = hE + es[:, None]
        wv = tl.load(w_ptr + woff, mask=eh, other=0.0).to(ACC)
        dw = tl.load(ds_ptr + woff, mask=eh, other=0.0)
        dsv = wv * (dw - delta[None, :])
        tl.store(ds_ptr + woff, dsv, mask=eh)
        m3 = emask[:, None, None] & hdmask[None, :, :]
        kj = tl.load(k_ptr + j[:, None, None] * HD + hd[None, :, :], mask=m3, other=0.0).to(ACC)
        gq += tl.reduce(dsv[:, :, None] * kj, 0, _SUM)
    tl.store(gq_ptr + row + hd, gq, mask=hdmask)


def _attn_bwd_cols(q_ptr, g_ptr, w_ptr, ds_ptr, crow_t_ptr, col_t_ptr, perm_t_ptr, gk_ptr, gv_ptr, E, H, D,
                   ACC: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr):
    # per source node j (the transposed pattern): gk_j = sum ds_e q_i, gv_j = sum w_e g_i
    j = tl.program_id(0)
    hs = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    ds = tl.arange(0, BLOCK_D)
    hmask = hs < H
    hd = hs[:, None] * D + ds[None, :]
    hdmask = hmask[:, None] & (ds[None, :] < D)
    HD = H * D
    start = tl.load(crow_t_ptr + j).to(tl.int64)
    end = tl.load(crow_t_ptr + j + 1).to(tl.int64)
    hE = hs.to(tl.int64)[None, :] * E
    gk = tl.full([BLOCK_H, BLOCK_D], 0.0, ACC)
    gv = tl.full([BLOCK_H, BLOCK_D], 0.0, ACC)
    for t0 in range(start, end, BLOCK_E):
        ts = t0 + tl.arange(0, BLOCK_E)
        tmask = ts < end
        e = tl.load(perm_t_ptr + ts, mask=tmask, other=0).to(tl.int64)
        i = tl.load(col_t_ptr + ts, mask=tmask, other=0).to(tl.int64)
        eh = tmask[:, None] & hmask[None, :]
        woff = hE + e[:, None]
        dsv = tl.load(ds_ptr + woff, mask=eh, other=0.0).to(ACC)
        wv = tl.load(w_ptr + woff, mask=eh, other=0.0).to(ACC)
        m3 = tmask[:, None, None] & hdmask[None, :, :]
        dst = i[:, None, None] * HD + hd[None, :, :]
        qi = tl.load(q_ptr + dst, mask=m3, other=0.0).to(ACC)
        gk += tl.reduce(dsv[:, :, None] * qi, 0, _SUM)
        gi = tl.load(g_ptr + dst, mask=m3, other=0.0).to(ACC)
        gv += tl.reduce(wv[:, :, None] * gi, 0, _SUM)
    out = j.to(tl.int64) * HD + hd
    tl.store(gk_ptr + out, gk, mask=hdmask)
    tl.store(gv_ptr + out, gv, mask=hdmask)


def _attention_blocks(H: int, D: int):
    """``(BLOCK_E, BLOCK_H, BLOCK_D, head blocks)``: a ``BLOCK_E x BLOCK_H x BLOCK_D`` tile of at
    most 4096 elements (about 32 fp32 registers a thread with 4 warps)."""
    BLOCK_D = _pow2(D)
    BLOCK_H = min(_pow2(H), max(1, 512 // BLOCK_D))
    BLOCK_E = max(1, min(32, 4096 // (BLOCK_H * BLOCK_D)))
    return BLOCK_E, BLOCK_H, BLOCK_D, triton.cdiv(H, BLOCK_H)


def attention_forward(q, k, v, l, b, crow, col):
    """``(out (N, H, D), w (H, E))``; inputs checked, contiguous, on one device."""
    N, H, D = q.shape
    E = col.numel()
    acc = acc_dtype(q.dtype)
    wdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    out = torch.empty_like(q)
    w = torch.empty(H, E, dtype=wdt, device=q.device)
    if N == 0:
        return out, w.to(q.dtype)
    BE, BH, BD, nh = _attention_blocks(H, D)
    dummy = q
    _launch(_attn_fwd, (N, nh), q.device, q, k, v, dummy if l is None else l, dummy if b is None else b,
            crow, col, out, w, E, H, D, HAS_L=l is not None, HAS_B=b is not None,
            B_PER_HEAD=b is not None and b.dim() == 2, ACC=acc, BLOCK_E=BE, BLOCK_H=BH, BLOCK_D=BD,
            num_warps=4)
    return out, w.to(q.dtype)


def attention_backward(q, k, v, w, g, gw, crow, col, crow_t, col_t, perm_t):
    """``(gq, gk, gv, ds (H, E))``; ``ds`` is the score gradient (that of ``l`` and ``b``)."""
    N, H, D = q.shape
    E = col.numel()
    acc = acc_dtype(q.dtype)
    wdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    ds = torch.empty(H, E, dtype=wdt, device=q.device)
    gq, gk, gv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    if N == 0 or k.shape[0] == 0:
        return gq.zero_(), gk.zero_(), gv.zero_(), ds.to(q.dtype)
    BE, BH, BD, nh = _attention_blocks(H, D)
    _launch(_attn_bwd_rows, (N, nh), q.device, k, v, w, g, w if gw is None else gw, crow, col, ds, gq, E, H, D,
            HAS_GW=gw is not None, ACC=acc, BLOCK_E=BE, BLOCK_H=BH, BLOCK_D=BD, num_warps=4)
    _launch(_attn_bwd_cols, (k.shape[0], nh), q.device, q, g, w, ds, crow_t, col_t, perm_t, gk, gv, E, H, D,
            ACC=acc, BLOCK_E=BE, BLOCK_H=BH, BLOCK_D=BD, num_warps=4)
    return gq, gk, gv, ds.to(q.dtype)


# ---------------------------------------------------------------------------------- edge MLPs
def _mlp_fwd(x_ptr, w_ptr, b_ptr, out_ptr, E, IN, OUT, stride_oh, stride_oe, stride_oo,
             L: tl.constexpr, P: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr, PREC: tl.constexpr):
    # rows of one block through head h's L layers (weights zero-padded to P x P, SiLU between)
    pid = tl.program_id(0)
    h = tl.program_id(1)
    rows = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    rmask = rows < E
    cols = tl.arange(0, P)
    a = tl.load(x_ptr + rows[:, None] * IN + cols[None, :], mask=rmask[:, None] & (cols[None, :] < IN),
                other=0.0).to(ACC)
    wp = w_ptr + h.to(tl.int64) * (L * P * P) + cols[:, None] * P + cols[None, :]
    bp = b_ptr + h.to(tl.int64) * (L * P) + cols
    for li in tl.static_range(L):
        W = tl.load(wp + li * P * P).to(ACC)
        a = tl.dot(a, tl.trans(W), input_precision=PREC) + tl.load(bp + li * P).to(ACC)[None, :]
        if li < L - 1:
            a = a / (1.0 + tl.exp(-a))
    optr = out_ptr + h.to(tl.int64) * stride_oh + rows[:, None] * stride_oe + cols[None, :] * stride_oo
    tl.store(optr, a, mask=rmask[:, None] & (cols[None, :] < OUT))


def _mlp_bwd(x_ptr, w_ptr, b_ptr, g_ptr, gx_ptr, gw_ptr, gb_ptr, E, IN, OUT, stride_gh, stride_ge, stride_go,
             num_blocks, num_programs,
             L: tl.constexpr, P: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr, PREC: tl.constexpr,
             NEED_X: tl.constexpr, X_ATOMIC: tl.constexpr):
    # backward of _mlp_fwd for head h. Each program takes the row blocks pid, pid + num_programs,
    # ... and, one layer li at a time (top down), sums that layer's weight gradient over its
    # blocks in registers, then adds it to gw/gb with one atomic add per entry (not one per
    # block: thousands of blocks adding to the same few hundred addresses would serialise).
    # Activations are recomputed from x, nothing is stored by the forward.
    pid = tl.program_id(0)
    h = tl.program_id(1)
    cols = tl.arange(0, P)
    head_w = h.to(tl.int64) * (L * P * P)
    head_b = h.to(tl.int64) * (L * P)
    wp = w_ptr + head_w + cols[:, None] * P + cols[None, :]
    bp = b_ptr + head_b + cols
    for li in tl.static_range(L - 1, -1, -1):
        gW = tl.full([P, P], 0.0, ACC)
        gb = tl.full([P], 0.0, ACC)
        for blk in range(pid, num_blocks, num_programs):
            rows = (blk * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)
            rmask = rows < E
            x = tl.load(x_ptr + rows[:, None] * IN + cols[None, :], mask=rmask[:, None] & (cols[None, :] < IN),
                        other=0.0).to(ACC)
            gptr = g_ptr + h.to(tl.int64) * stride_gh + rows[:, None] * stride_ge + cols[None, :] * stride_go
            g = tl.load(gptr, mask=rmask[:, None] & (cols[None, :] < OUT), other=0.0).to(ACC)
            a = x
            # g: d/d(output of layer m), walked down from the top to layer li
            for m in tl.static_range(L - 1, li - 1, -1):
                W = tl.load(wp + m * P * P).to(ACC)
                if m < L - 1 or m == li:
                    a = x  # the input of layer m
                    for r in tl.static_range(m):
                        a = tl.dot(a, tl.trans(tl.load(wp + r * P * P).to(ACC)), input_precision=PREC) \
                            + tl.load(bp + r * P).to(ACC)[None, :]
                        a = a / (1.0 + tl.exp(-a))
                if m < L - 1:  # times silu'(z_m)
                    z = tl.dot(a, tl.trans(W), input_precision=PREC) + tl.load(bp + m * P).to(ACC)[None, :]
                    sg = 1.0 / (1.0 + tl.exp(-z))
                    g = g * (sg * (1.0 + z * (1.0 - sg)))
                if m > li:
                    g = tl.dot(g, W, input_precision=PREC)
            gW += tl.dot(tl.trans(g), a, input_precision=PREC)
            gb += tl.reduce(g, 0, _SUM)
            if li == 0:
                if NEED_X:
                    gxv = tl.dot(g, tl.load(wp).to(ACC), input_precision=PREC)
                    xptr = gx_ptr + rows[:, None] * IN + cols[None, :]
                    xmask = rmask[:, None] & (cols[None, :] < IN)
                    if X_ATOMIC:
                        tl.atomic_add(xptr, gxv, mask=xmask)
                    else:
                        tl.store(xptr, gxv, mask=xmask)
        tl.atomic_add(gw_ptr + head_w + li * P * P + cols[:, None] * P + cols[None, :], gW)
        tl.atomic_add(gb_ptr + head_b + li * P + cols, gb)


#: widest padded layer the MLP kernels take (registers: BLOCK x P activations, P x P weights)
MAX_MLP_WIDTH = 64


def mlp_width(x_dim: int, weights) -> int:
    """The padded width ``P`` (a power of two, at least 16, the smallest ``tl.dot`` size) of
    the MLP kernels for input width ``x_dim`` and ``weights (H, out, in)``."""
    return _pow2(max([x_dim] + [max(w.shape[1], w.shape[2]) for w in weights]), 16)


def _mlp_block(P: int) -> int:
    return 64 if P <= 32 else 32


def _precision(dtype: torch.dtype) -> str:
    if dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32:
        return "tf32"
    return "ieee"


def mlp_forward(x, Wp, bp, L: int, P: int, out_features: int, heads_first: bool):
    """Run the MLP kernels' forward: ``x (E, IN)``, padded weights ``Wp (H, L, P, P)`` and
    biases ``bp (H, L, P)`` (accumulation dtype). Returns ``(H, E)`` (``heads_first``, one
    output a head) or ``(E, OUT)`` (one head)."""
    E, IN = x.shape
    H = Wp.shape[0]
    acc = acc_dtype(x.dtype)
    if heads_first:
        out = torch.empty(H, E, dtype=x.dtype, device=x.device)
        strides = (E, 1, 0)
    else:
        out = torch.empty(E, out_features, dtype=x.dtype, device=x.device)
        strides = (0, out_features, 1)
    if E == 0:
        return out
    BLOCK = _mlp_block(P)
    _launch(_mlp_fwd, (triton.cdiv(E, BLOCK), H), x.device, x, Wp, bp, out, E, IN, out_features, *strides,
            L=L, P=P, BLOCK=BLOCK, ACC=acc, PREC=_precision(x.dtype), num_warps=4)
    return out


def mlp_backward(g, x, Wp, bp, L: int, P: int, out_features: int, heads_first: bool, need_x: bool):
    """``(gx or None, gW (H, L, P, P), gb (H, L, P))`` for the output gradient ``g`` laid out as
    :func:`mlp_forward`'s output; the weight gradients in the accumulation dtype."""
    E, IN = x.shape
    H = Wp.shape[0]
    acc = acc_dtype(x.dtype)
    gW, gb = torch.zeros_like(Wp), torch.zeros_like(bp)
    atomic = H > 1
    gx = None
    if need_x:
        gx = (torch.zeros(E, IN, dtype=Wp.dtype, device=x.device) if atomic else torch.empty_like(x))
    if E == 0:
        return (None if gx is None else gx.to(x.dtype)), gW, gb
    strides = (E, 1, 0) if heads_first else (0, out_features, 1)
    BLOCK = _mlp_block(P)
    blocks = triton.cdiv(E, BLOCK)
    if x.device.type == "cuda":  # a few programs per multiprocessor, each summing many blocks
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count
        programs = min(blocks, max(1, 4 * sms // H))
    else:  # the interpreter: programs of two blocks (the summing loop is exercised)
        programs = max(1, blocks // 2)
    _launch(_mlp_bwd, (programs, H), x.device, x, Wp, bp, g, x if gx is None else gx, gW, gb,
            E, IN, out_features, *strides, blocks, programs, L=L, P=P, BLOCK=BLOCK, ACC=acc,
            PREC=_precision(x.dtype), NEED_X=need_x, X_ATOMIC=atomic, num_warps=4)
    return (None if gx is None else gx.to(x.dtype)), gW, gb
