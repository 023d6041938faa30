"""Compile every Triton kernel of pyg_lie.ops for NVIDIA GPUs without a GPU (ahead of time,
with the ptxas that ships with Triton): catches what the interpreter accepts but the compiler
rejects (non-constexpr loop bounds, dot shapes, dtypes) before a device is lent.

    PYTHONPATH=. python scripts/triton_compile_check.py [--arch 90 80]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from pyg_lie.ops import _triton as T  # noqa: E402


def compile_kernel(fn, types, constexprs, arch):
    jf = triton.jit(fn)
    signature = {name: types.get(name, "constexpr") for name in jf.arg_names}
    t = time.perf_counter()
    triton.compile(ASTSource(jf, signature, constexprs), target=GPUTarget("cuda", arch, 32),
                   options={"num_warps": 4})
    return time.perf_counter() - t


def cases():
    i64, i32 = "*i64", "i32"
    for data, acc in (("*fp32", tl.float32), ("*bf16", tl.float32), ("*fp64", tl.float64)):
        buf = "*fp64" if data == "*fp64" else "*fp32"
        for H, D in ((4, 16), (3, 5), (8, 64)):
            BE, BH, BD, _ = T._attention_blocks(H, D)
            blocks = dict(ACC=acc, BLOCK_E=BE, BLOCK_H=BH, BLOCK_D=BD)
            yield T._attn_fwd, dict(q_ptr=data, k_ptr=data, v_ptr=data, l_ptr=data, b_ptr=data, crow_ptr=i64,
                                    col_ptr=i64, out_ptr=data, w_ptr=buf, E=i32, H=i32, D=i32), \
                dict(HAS_L=True, HAS_B=True, B_PER_HEAD=H == 3, **blocks)
            yield T._attn_bwd_rows, dict(k_ptr=data, v_ptr=data, w_ptr=data, g_ptr=data, gw_ptr=data, crow_ptr=i64,
                                         col_ptr=i64, ds_ptr=buf, gq_ptr=data, E=i32, H=i32, D=i32), \
                dict(HAS_GW=True, **blocks)
            yield T._attn_bwd_cols, dict(q_ptr=data, g_ptr=data, w_ptr=data, ds_ptr=buf, crow_t_ptr=i64,
                                         col_t_ptr=i64, perm_t_ptr=i64, gk_ptr=data, gv_ptr=data, E=i32, H=i32,
                                         D=i32), blocks
        for L, P in ((1, 16), (3, 16), (4, 64)):
            prec = "ieee" if data == "*fp64" else "tf32"
            block = T._mlp_block(P)
            yield T._mlp_fwd, dict(x_ptr=data, w_ptr=buf, b_ptr=buf, out_ptr=data, E=i32, IN=i32, OUT=i32,
                                   stride_oh=i32, stride_oe=i32, stride_oo=i32), \
                dict(L=L, P=P, BLOCK=block, ACC=acc, PREC=prec)
            yield T._mlp_bwd, dict(x_ptr=data, w_ptr=buf, b_ptr=buf, g_ptr=data, gx_ptr=buf, gw_ptr=buf, gb_ptr=buf,
                                   E=i32, IN=i32, OUT=i32, stride_gh=i32, stride_ge=i32, stride_go=i32,
                                   num_blocks=i32, num_programs=i32), \
                dict(L=L, P=P, BLOCK=block, ACC=acc, PREC=prec, NEED_X=True, X_ATOMIC=L == 3)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arch", type=int, nargs="+", default=[90], help="CUDA compute capabilities, e.g. 80 90")
    args = p.parse_args(argv)
    failures = 0
    for arch in args.arch:
        for fn, types, constexprs in cases():
            desc = f"sm_{arch} {fn.__name__} {types[next(iter(types))]} " + \
                ", ".join(f"{k}={v}" for k, v in constexprs.items() if k != "ACC")
            try:
                print(f"ok   {desc} ({compile_kernel(fn, types, constexprs, arch):.1f} s)", flush=True)
            except Exception as err:  # noqa: BLE001 - report every failing kernel
                failures += 1
                print(f"FAIL {desc}: {type(err).__name__}: {str(err)[:2000]}", flush=True)
    print(f"triton {triton.__version__}: {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
