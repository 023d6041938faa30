"""Benchmarks run by the pyg-lie CLI (one module per task, with add_arguments/main)."""
import os
import platform


def host_description() -> str:
    """The CPU the numbers come from, e.g. ``AMD EPYC (x86 family 23 model 1), 2 CPUs, FMA
    AVX2, torch 2.14.1``. Ratios between compute-bound and memory-bound code change with the
    vector units: against the official LieTransformer, 8 of 11 configurations reached 10x on a
    host with AVX-512 and 2-3 of 11 on one with 128-bit FMA units (docs/lie_transformer.md)."""
    import torch

    name, family, model, flags = platform.processor() or platform.machine(), "", "", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "model name" and value:
                    name = value
                elif key == "cpu family":
                    family = value
                elif key == "model":
                    model = value
                elif key == "flags":
                    flags = set(value.split())
    except OSError:
        pass
    ident = f" (x86 family {family} model {model})" if family and model else ""
    vec = " ".join(f.upper().replace("_", "-") for f in ("fma", "avx2", "avx512f") if f in flags)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{name}{ident}, {cpus} CPUs" + (f", {vec}" if vec else "") + f", torch {torch.__version__}"
