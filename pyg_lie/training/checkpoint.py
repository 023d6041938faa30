r"""Resumable checkpoints: model, optimiser, scheduler, epoch and every rank's RNG states.

A checkpoint written at the end of epoch ``e`` and loaded into a fresh process
continues with epoch ``e + 1`` exactly as an uninterrupted run would: the
samplers reshuffle from ``seed + epoch`` and the RNG states (Python, NumPy,
torch CPU and CUDA) of every rank are restored, so random lifts, dropout or
augmentation draw the same numbers.

:func:`save_checkpoint` is collective (all ranks must call it: it gathers the
RNG states); only rank 0 writes, atomically (temporary file + ``os.replace``).
Checkpoints are pickles: load only files you wrote (``weights_only=False``).
"""
from __future__ import annotations

import os
import random
from typing import Any, Dict, Optional

import numpy as np
import torch
from torch import nn

from ._atomic import atomic_open
from .ddp import DistEnv, gather_objects, unwrap

__all__ = ["rng_state", "set_rng_state", "save_checkpoint", "load_checkpoint", "load_weights"]


def rng_state() -> Dict[str, Any]:
    """This process's RNG states (Python, NumPy, torch CPU and all CUDA devices)."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Dict[str, Any]) -> None:
    """Restore states produced by :func:`rng_state`."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: str, model: nn.Module, optimizer: torch.optim.Optimizer,
                    scheduler: Optional[Any], epoch: int, env: DistEnv,
                    extra: Optional[Dict[str, Any]] = None) -> None:
    """Write the training state after ``epoch`` (collective; rank 0 writes ``path``).

    Args:
        path: file to write (its folder is created).
        model: the (possibly DDP-wrapped) model; the unwrapped ``state_dict`` is saved.
        optimizer, scheduler: saved via their ``state_dict`` (scheduler may be ``None``).
        epoch: the last *completed* epoch (0-based).
        env: the distributed environment.
        extra: anything else picklable (metric history, arguments).
    """
    rngs = gather_objects(rng_state(), env)
    if not env.is_main:
        return
    ckpt = {
        "model": unwrap(model).state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "epoch": epoch,
        "world_size": env.world_size,
        "rng": rngs,
        "extra": extra or {},
    }
    with atomic_open(path, "wb") as f:  # a run killed mid-save keeps the previous checkpoint
        torch.save(ckpt, f)


def _read(path: str, flag: str) -> Any:
    """``torch.load`` of ``path`` with every way it can fail as one ``ValueError`` naming the file."""
    if not os.path.isfile(path):
        raise ValueError(f"{flag}: checkpoint {path!r} does not exist")
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except KeyboardInterrupt:
        raise
    except MemoryError:  # random bytes read as a legacy pickle can claim a huge allocation
        size = os.path.getsize(path)
        raise ValueError(f"{flag}: {path!r} ({size} bytes) is not a readable checkpoint: loading it asks for "
                         "more memory than this machine has (a corrupt or foreign file, or a checkpoint too "
                         "large for this machine)") from None
    except Exception as err:  # truncated zip, random bytes, a pickle of a class that is gone, ...
        size = os.path.getsize(path)
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ValueError(f"{flag}: {path!r} ({size} bytes) is not a readable checkpoint, truncated or not "
                         f"written by torch.save ({type(err).__name__}: {first})") from None


def _checkpoint_dict(path: str, flag: str, keys=("model",)) -> Dict[str, Any]:
    ckpt = _read(path, flag)
    if not isinstance(ckpt, dict) or not all(k in ckpt for k in keys):
        found = sorted(map(str, ckpt))[:6] if isinstance(ckpt, dict) else type(ckpt).__name__
        raise ValueError(f"{flag}: {path!r} is not a pyg-lie training checkpoint (expected a dict with "
                         f"{', '.join(keys)}; found {found})")
    if not isinstance(ckpt["model"], dict):
        raise ValueError(f"{flag}: {path!r} is not a pyg-lie training checkpoint ('model' is a "
                         f"{type(ckpt['model']).__name__}, not a state dict)")
    return ckpt


def _check_state(path: str, flag: str, model: nn.Module, state: Dict[str, Any], hint: str = "") -> None:
    """Raise (before anything is loaded) when ``state`` does not fit ``model`` exactly."""
    own = unwrap(model).state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    shapes = [k for k in own if k in state and isinstance(state[k], torch.Tensor)
              and tuple(state[k].shape) != tuple(own[k].shape)]
    if missing or unexpected or shapes:
        what = []
        if missing:
            what.append(f"{len(missing)} tensor(s) of this model missing (e.g. {missing[0]!r})")
        if unexpected:
            what.append(f"{len(unexpected)} unknown tensor(s) (e.g. {unexpected[0]!r})")
        if shapes:
            k = shapes[0]
            what.append(f"{len(shapes)} tensor(s) of another shape (e.g. {k!r}: saved "
                        f"{tuple(state[k].shape)}, this model {tuple(own[k].shape)})")
        raise ValueError(f"{flag}: {path!r} holds a different architecture{hint}: {'; '.join(what)}")


def _check_optimizer(path: str, flag: str, optimizer: torch.optim.Optimizer, state: Any) -> None:
    groups = state.get("param_groups") if isinstance(state, dict) else None
    sizes = [len(g["params"]) for g in optimizer.param_groups]
    saved = [len(g.get("params", ())) for g in groups] if isinstance(groups, list) else None
    if saved != sizes:
        raise ValueError(f"{flag}: {path!r} holds an optimiser state for parameter groups of sizes "
                         f"{saved}, this model's optimiser has {sizes}")


def load_checkpoint(path: str, model: nn.Module, optimizer: Optional[torch.optim.Optimizer],
                    scheduler: Optional[Any], env: DistEnv, flag: str = "--resume") -> Dict[str, Any]:
    """Load a checkpoint into the given objects (on every rank) and restore this rank's RNG.

    If the checkpoint was written with a different number of processes, every
    rank restores rank ``min(rank, saved - 1)``'s RNG state (data order is still
    exact because it depends only on the seed and the epoch).

    Before anything is loaded the file is checked (readable, a training checkpoint,
    weights and optimiser groups that fit ``model`` and ``optimizer``): a missing,
    truncated or foreign file (random bytes, a torch file of another model) raises one
    ``ValueError`` naming ``flag``, the file and what is wrong, and leaves the model,
    the optimiser and the output folder as they were (the command line prints it
    as a usage error, exit status 2).

    Returns:
        The checkpoint dict (``epoch``, ``extra``, ...); training resumes at ``epoch + 1``.
    """
    ckpt = _checkpoint_dict(path, flag, ("model", "optimizer", "epoch"))
    _check_state(path, flag, model, ckpt["model"])
    if optimizer is not None:
        _check_optimizer(path, flag, optimizer, ckpt["optimizer"])
    if isinstance(ckpt["epoch"], bool) or not isinstance(ckpt["epoch"], int):
        raise ValueError(f"{flag}: {path!r} has no valid epoch (found {ckpt['epoch']!r})")
    try:
        unwrap(model).load_state_dict(ckpt["model"])
        if optimizer is not None:
            optimizer.load_state_dict(ckpt["optimizer"])
        if scheduler is not None and ckpt.get("scheduler") is not None:
            scheduler.load_state_dict(ckpt["scheduler"])
    except (RuntimeError, ValueError, KeyError, TypeError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ValueError(f"{flag}: {path!r} does not fit this run ({type(err).__name__}: {first})") from None
    rngs = ckpt.get("rng") or []
    if rngs:
        set_rng_state(rngs[min(env.rank, len(rngs) - 1)])
    return ckpt


def load_weights(path: str, model: nn.Module, flag: str = "--init-from", hint: str = "") -> None:
    """Load only the model weights of checkpoint ``path`` (no optimiser, schedule or RNG state).

    For warm restarts: a new run starts from trained weights with its own
    optimiser, schedule and seed. ``flag`` names the option in error messages
    and ``hint`` says what must match when the architectures differ.

    Raises:
        ValueError: ``path`` does not exist, is not a readable checkpoint or holds
            weights of another architecture (the model is then left unchanged).
    """
    state = _checkpoint_dict(path, flag)["model"]
    _check_state(path, flag, model, state, hint)
    try:
        unwrap(model).load_state_dict(state)
    except RuntimeError as err:
        raise ValueError(f"{flag}: {path!r} holds a different architecture{hint}: "
                         f"{str(err).splitlines()[0]}") from None
