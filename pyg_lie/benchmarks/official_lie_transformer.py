"""The official LieTransformer code as a peer of ``pyg-lie bench lie-self-attention``.

``--official-src DIR`` times the authors' implementation (Hutchinson et al. 2021,
"LieTransformer: Equivariant self-attention for Lie groups") in the same run as the model, so that the speed-up is
measured on one host instead of against figures taken on another. Its code is not on the
package registry: ``DIR`` must hold the package ``eqv_transformer`` of
github.com/oxcsml/lie-transformer and the package ``lie_conv`` of the authors' LieConv fork,
github.com/MJHutchinson/LieConv (its groups have the ``lie_dim`` the transformer reads; the
original github.com/mfinzi/LieConv supplies ``utils.py`` and ``masked_batchnorm.py`` where the
fork lacks them), the two folders side by side, and ``einops`` must be installed. One line
of LieConv's ``lieGroups.py`` is a syntax error in Python 3.9+; docs/lie_transformer.md says
which and how to mend it. Nothing of theirs is copied here: this module builds their
``EquivariantTransformer`` with the options of their constellation experiment and the
benchmark's widths, and feeds it the benchmark's point clouds.
"""
from __future__ import annotations

import importlib
import os
import sys
from typing import Callable, Dict, Tuple

import torch
from torch import Tensor

__all__ = ["check_source", "official_step"]

#: alpha of the official SE(2) (the weight of the rotation in its group distance), as in their
#: constellation configuration
SE2_ALPHA = 0.2


def check_source(src: str) -> None:
    """Import the official packages from ``src``; ``ValueError`` naming what is missing."""
    missing = [p for p in ("eqv_transformer", "lie_conv") if not os.path.isdir(os.path.join(src, p))]
    if missing:
        raise ValueError(
            f"--official-src {src!r}: no {' or '.join(missing)} package in this folder; it must hold "
            "eqv_transformer (github.com/oxcsml/lie-transformer) and lie_conv (github.com/MJHutchinson/LieConv)")
    if src not in sys.path:
        sys.path.insert(0, src)
    try:
        for module in ("eqv_transformer.eqv_attention", "lie_conv.lieGroups"):
            importlib.import_module(module)
    except (ImportError, SyntaxError) as err:
        raise ValueError(f"--official-src {src!r}: importing the official code failed: {err!r} "
                         "(it needs `pip install einops`; see docs/lie_transformer.md for the one line of "
                         "LieConv that Python 3 rejects)") from err
    if not hasattr(sys.modules["lie_conv.lieGroups"].T, "lie_dim"):
        raise ValueError(f"--official-src {src!r}: this lie_conv has no LieGroup.lie_dim, which the official "
                         "transformer reads; use the authors' fork, github.com/MJHutchinson/LieConv")


def official_model(cfg: Dict, src: str) -> torch.nn.Module:
    """The official model for a benchmark configuration: ``cfg`` with ``group`` ("T2" or
    "SE2"), ``K`` lift samples, ``dim``, ``layers``, ``heads`` and ``degree`` (``None``: all
    pairs; else the official ``mc_samples`` nearest lifted neighbours, ``degree * K``)."""
    if cfg["group"] not in ("T2", "SE2"):
        raise ValueError(f"the official peer is timed for T2 and SE2 only, not {cfg['group']!r}")
    check_source(src)
    from eqv_transformer.eqv_attention import EquivariantTransformer
    from lie_conv.lieGroups import SE2, T
    group = T(2) if cfg["group"] == "T2" else SE2(SE2_ALPHA)
    nbhd = 0 if cfg.get("degree") is None else round(cfg["degree"] * cfg["K"])
    return EquivariantTransformer(
        dim_input=1, dim_output=1, dim_hidden=cfg["dim"], num_layers=cfg["layers"], num_heads=cfg["heads"],
        group=group, liftsamples=cfg["K"], mc_samples=nbhd, fill=1.0,
        # their constellation experiment's options: per-head location MLP 16-16 ("mlp") plus
        # dot-product content, softmax, pre-LayerNorm blocks, mean pooling
        kernel_type="mlp", kernel_dim=16, kernel_act="swish", attention_fn="softmax",
        block_norm="layer_pre", output_norm="none", kernel_norm="none", architecture="model_1",
        global_pool=True, global_pool_mean=True)


def official_step(cfg: Dict, src: str, pos: Tensor, clouds: int) -> Tuple[Callable[[], None], int]:
    """One forward + backward of the official model on ``clouds`` equal clouds ``pos (clouds
    n, 2)`` with features 1 (as the model gets); returns the step and the parameter count."""
    model = official_model(cfg, src)
    data = (pos.view(clouds, -1, pos.size(-1)), torch.ones(clouds, pos.size(0) // clouds, 1),
            torch.ones(clouds, pos.size(0) // clouds, dtype=torch.bool))

    def step():
        model(data).sum().backward()
    return step, sum(p.numel() for p in model.parameters())
