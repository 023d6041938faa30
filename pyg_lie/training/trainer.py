r"""A small epoch loop shared by the spring and QM9 experiments.

It works identically with one process and under ``torchrun`` (see
:mod:`pyg_lie.training.ddp` for why results match for the same global batch):
per-epoch reshuffling through ``DistributedSampler.set_epoch``, a tqdm bar and
all logging on rank 0, CSV metrics, a resumable checkpoint after every
``checkpoint_every`` epochs and a learning-curve plot at the end.
"""
from __future__ import annotations

import math
import os
import time
from typing import Any, Callable, Dict, List, Optional, Type

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from .checkpoint import load_checkpoint, save_checkpoint
from .ddp import DistEnv, all_reduce_sum, train_loader
from .logging import MetricsLogger, plot_learning_curves

__all__ = ["fit", "AMP_DTYPES", "add_amp_argument"]

#: ``--amp`` choices of the training commands
AMP_DTYPES = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def add_amp_argument(p) -> None:
    """``--amp {none,bf16,fp16}`` on an ``argparse`` parser (pass ``AMP_DTYPES[args.amp]`` to
    :func:`fit`)."""
    p.add_argument("--amp", choices=list(AMP_DTYPES), default="none",
                   help="mixed-precision training under torch.autocast: bf16, or fp16 with a gradient "
                        "scaler; the fused kernels stay in float32 and evaluation runs in full precision")


def fit(model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Optional[Any],
        train_set: Dataset, env: DistEnv,
        loss_fn: Callable[[nn.Module, Any], Tensor],
        evaluate: Optional[Callable[[nn.Module, int], Dict[str, float]]] = None,
        *, epochs: int, batch_size: int, seed: int, out_dir: str,
        resume: Optional[str] = None, loader_cls: Type[DataLoader] = DataLoader,
        progress: bool = True, grad_clip: Optional[float] = None,
        scheduler_per_batch: bool = False, checkpoint_every: int = 1, eval_every: int = 1,
        extra: Optional[Dict[str, Any]] = None, desc: str = "train",
        stop_after: Optional[int] = None,
        loader_kwargs: Optional[Dict[str, Any]] = None,
        amp: Optional[torch.dtype] = None) -> List[Dict[str, float]]:
    """Train for ``epochs`` epochs (continuing from ``resume`` if given).

    Args:
        model: the model, already on ``env.device`` and DDP-wrapped when distributed.
        optimizer, scheduler: scheduler may be ``None``; stepped per epoch unless
            ``scheduler_per_batch``.
        train_set: training data set.
        env: distributed environment.
        loss_fn: ``loss_fn(model, batch) -> scalar`` mean loss over the rank's batch;
            the batch is what ``loader_cls`` yields (moving it to the device is the
            function's job).
        evaluate: ``evaluate(model, epoch) -> {name: value}``, called on all ranks
            (it must reduce over ranks itself) every ``eval_every`` epochs and last.
        epochs: total number of epochs (not the number still to run).
        batch_size: *global* batch size (split evenly over the ranks).
        seed: data-order seed (also the base of every per-epoch shuffle).
        out_dir: where ``metrics.csv``, ``checkpoint.pt`` and ``learning_curves.png`` go.
        resume: a checkpoint path to continue from.
        extra: stored in the checkpoint (e.g. the command-line arguments).
        stop_after: run at most this many epochs in this call (a time-boxed job);
            a checkpoint is written when stopping, continue with ``resume``.
        loader_kwargs: extra keyword arguments of ``loader_cls`` (e.g. ``num_workers``).
        amp: run ``loss_fn`` under ``torch.autocast`` with this dtype (``torch.bfloat16``, or
            ``torch.float16`` with a gradient scaler, whose scale is not checkpointed and
            re-adapts within a few steps after a resume); ``None``: full precision.
            Evaluation is never autocast.

    Returns:
        The metric rows (on every rank; only rank 0 writes them).
    """
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    if amp not in (None, torch.bfloat16, torch.float16):
        raise ValueError(f"amp must be None, torch.bfloat16 or torch.float16, got {amp!r}")
    scaler = torch.amp.GradScaler(env.device.type, enabled=amp == torch.float16)
    loader = train_loader(train_set, batch_size, env, seed=seed, loader_cls=loader_cls, **(loader_kwargs or {}))
    logger = MetricsLogger(out_dir, env, resume=resume is not None)
    ckpt_path = os.path.join(out_dir, "checkpoint.pt")
    start = 0
    if resume is not None:
        ck = load_checkpoint(resume, model, optimizer, scheduler, env)
        start = int(ck["epoch"]) + 1
        if start > epochs:  # the results would say `epochs` but hold a model trained for longer
            raise ValueError(f"--resume: {resume!r} holds a model trained for {start} epochs, more than the "
                             f"{epochs} asked for (--epochs {epochs}); pass --epochs {start} or more to continue "
                             f"it, or start a new run without --resume")
        logger.truncate(int(ck["epoch"]))
    rows = list(logger.rows) if env.is_main else []
    stop = epochs if stop_after is None else min(epochs, start + stop_after)
    for epoch in range(start, stop):
        loader.sampler.set_epoch(epoch)  # type: ignore[union-attr]
        model.train()
        t0 = time.time()
        total, steps = torch.zeros((), dtype=torch.float64), 0
        bar = tqdm(loader, desc=f"{desc} {epoch + 1}/{epochs}", disable=not (progress and env.is_main),
                   leave=False, dynamic_ncols=True)
        for batch in bar:
            with torch.autocast(env.device.type, dtype=amp, enabled=amp is not None):
                loss = loss_fn(model, batch)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"non-finite training loss {loss.item()} at epoch {epoch}; "
                                         f"lower --lr or enable --grad-clip")
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()  # the scaler is a pass-through unless amp is float16
            if grad_clip is not None:
                scaler.unscale_(optimizer)
                nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            scaler.step(optimizer)
            scaler.update()
            if scheduler is not None and scheduler_per_batch:
                scheduler.step()
            total += loss.detach().double().cpu()
            steps += 1
            if env.is_main and progress:
                bar.set_postfix(loss=f"{loss.item():.3e}")
        bar.close()
        # a step can leave non-finite weights behind a finite loss: stop before evaluating them
        if not bool(torch.stack([torch.isfinite(p.detach()).all() for p in model.parameters()]).all()):
            raise FloatingPointError(f"non-finite model parameters after epoch {epoch}; lower --lr or enable "
                                     f"--grad-clip")
        if scheduler is not None and not scheduler_per_batch:
            scheduler.step()
        # the rank-mean of per-rank means is the global-batch mean (equal per-rank sizes)
        train_loss = float(all_reduce_sum(total, env)) / (env.world_size * max(steps, 1))
        row: Dict[str, float] = {"epoch": epoch, "train_loss": train_loss,
                                 "lr": optimizer.param_groups[0]["lr"], "time": time.time() - t0}
        if evaluate is not None and ((epoch + 1) % eval_every == 0 or epoch + 1 == epochs):
            model.eval()
            row.update(evaluate(model, epoch))
        logger.log(row)
        rows.append(row)
        if (epoch + 1) % checkpoint_every == 0 or epoch + 1 == stop:
            save_checkpoint(ckpt_path, model, optimizer, scheduler, epoch, env, extra=extra)
        if env.is_main and progress:
            msg = " ".join(f"{k}={v:.4g}" for k, v in row.items() if k != "epoch" and math.isfinite(v))
            tqdm.write(f"epoch {epoch + 1}/{epochs}: {msg}")
    logger.close()
    if env.is_main and os.path.isfile(logger.path):
        plot_learning_curves(logger.path, os.path.join(out_dir, "learning_curves.png"), title=desc)
    return rows
