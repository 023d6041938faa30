"""Benchmarks run by the pyg-lie CLI (one module per task, with add_arguments/main)."""
import os
import platform


def host_description() -> str:
    """The class of CPU the numbers come from (model family, core count, vector units, torch
    version). Ratios between compute-bound and memory-bound code change with the vector units,
    so benchmark tables name it beside every ratio."""
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
