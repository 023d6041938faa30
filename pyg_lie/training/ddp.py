r"""Multi-process data parallelism with PyTorch's own ``torch.distributed`` + DDP.

Launch any training command with ``torchrun``::

    torchrun --nproc_per_node=P -m pyg_lie train springs ...

``torchrun`` sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and
``MASTER_PORT``; :func:`init_distributed` reads them and starts a process group
(``nccl`` on CUDA, ``gloo`` on CPU).  Without them everything runs in one
process and no process group is created.

Equivalence with single-process training for the same *global* batch ``B``:

* :func:`train_loader` gives every rank ``B / P`` samples per step with a
  :class:`~torch.utils.data.DistributedSampler` (``drop_last=True``) and a
  ``DataLoader(drop_last=True)``.  The sampler permutes ``range(N)`` with a
  generator seeded by ``seed + epoch`` (identical on all ranks and for ``P = 1``)
  and deals positions round-robin, so step ``s`` of rank ``r`` holds the
  permutation positions ``s B + r, s B + r + P, ...``: the union over ranks is
  exactly the single-process batch ``s``.  Both settings take ``floor(N / B)``
  steps per epoch (incomplete global batches are dropped in both).
* Each rank minimises the *mean* loss over its ``B / P`` samples; DDP averages
  gradients over ranks, which equals the gradient of the mean over all ``B``.
* DDP broadcasts rank 0's parameters at wrap time, so all ranks start equal.

Results then agree up to floating-point summation order (about 1e-7 relative
in float32).  Evaluation shards the data without padding (:class:`ShardSampler`)
and sums errors with :func:`all_reduce_sum`.
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Type

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler

__all__ = ["DistEnv", "init_distributed", "cleanup", "wrap_model", "unwrap", "train_loader",
           "eval_loader", "ShardSampler", "all_reduce_sum", "broadcast_object", "gather_objects", "seed_everything"]


@dataclass
class DistEnv:
    """Where this process sits: ``rank`` of ``world_size``, its ``device`` and backend."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    backend: Optional[str] = None

    @property
    def is_main(self) -> bool:
        """True on rank 0, the only rank that logs, plots and writes checkpoints."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def init_distributed(device: Optional[str] = None) -> DistEnv:
    """Initialise from torchrun's environment variables (no-op for a single process).

    Args:
        device: ``"cpu"``, ``"cuda"`` or ``None`` (CUDA when available).  Under
            torchrun with CUDA each rank takes ``cuda:LOCAL_RANK``.
    """
    if device not in (None, "cpu", "cuda"):
        raise ValueError(f"device must be 'cpu', 'cuda' or None, got {device!r}")
    use_cuda = torch.cuda.is_available() if device is None else device == "cuda"
    if use_cuda and not torch.cuda.is_available():
        raise ValueError("device='cuda' requested but CUDA is not available; pass --device cpu")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device(f"cuda:{local}") if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(dev)
    backend = None
    if world > 1:
        backend = "nccl" if use_cuda else "gloo"
        if not dist.is_initialized():
            dist.init_process_group(backend=backend, rank=rank, world_size=world)
    return DistEnv(rank=rank, world_size=world, local_rank=local, device=dev, backend=backend)


#: training commands that run data-parallel under torchrun
DDP_COMMANDS = ("springs", "qm9", "constellation")


def require_single_process(command: str) -> None:
    """Stop a single-process training command started by torchrun with several processes
    (each would train on all the data and write the same files)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        raise SystemExit(f"pyg-lie train {command} runs in one process, but torchrun started {world} "
                         f"(WORLD_SIZE={world}); run it without torchrun, or use a data-parallel "
                         f"command: {', '.join(DDP_COMMANDS)}")


def cleanup(env: DistEnv) -> None:
    """Destroy the process group (call at the end of ``main``)."""
    if env.distributed and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def wrap_model(model: nn.Module, env: DistEnv, find_unused_parameters: bool = False) -> nn.Module:
    """Move to ``env.device`` and wrap in :class:`~torch.nn.parallel.DistributedDataParallel` if ``P > 1``.

    ``find_unused_parameters=True`` is needed when some parameters never get a
    gradient (e.g. the output bias of a potential whose gradient drives the
    dynamics).
    """
    model = model.to(env.device)
    if not env.distributed:
        return model
    ids = [env.device.index] if env.device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=ids,
                                               find_unused_parameters=find_unused_parameters)


def unwrap(model: nn.Module) -> nn.Module:
    """The module inside a DDP wrapper (or the module itself)."""
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def train_loader(dataset: Dataset, global_batch_size: int, env: DistEnv, seed: int = 0,
                 shuffle: bool = True, loader_cls: Type[DataLoader] = DataLoader,
                 **loader_kwargs: Any) -> DataLoader:
    """A loader whose per-rank batches partition the single-process global batches.

    Call ``loader.sampler.set_epoch(epoch)`` at the start of every epoch.
    ``loader_cls`` may be :class:`torch_geometric.loader.DataLoader`.
    """
    if global_batch_size < 1 or global_batch_size % env.world_size:
        raise ValueError(f"batch size {global_batch_size} must be a positive multiple of the number of "
                         f"processes ({env.world_size}); change --batch-size or --nproc_per_node")
    n = len(dataset)  # type: ignore[arg-type]
    if n < global_batch_size:
        raise ValueError(f"the training set ({n}) is smaller than the batch size ({global_batch_size}); "
                         f"lower --batch-size")
    sampler = DistributedSampler(dataset, num_replicas=env.world_size, rank=env.rank, shuffle=shuffle,
                                 seed=seed, drop_last=True)
    return loader_cls(dataset, batch_size=global_batch_size // env.world_size, sampler=sampler,
                      drop_last=True, **loader_kwargs)


class ShardSampler(Sampler[int]):
    """Rank ``r`` of ``P`` gets indices ``r, r + P, ...`` of ``range(n)`` (no padding, no shuffling)."""

    def __init__(self, n: int, rank: int, world_size: int) -> None:
        self.n, self.rank, self.world = n, rank, world_size

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.rank, self.n, self.world))

    def __len__(self) -> int:
        return len(range(self.rank, self.n, self.world))


def eval_loader(dataset: Dataset, batch_size: int, env: DistEnv,
                loader_cls: Type[DataLoader] = DataLoader, **loader_kwargs: Any) -> DataLoader:
    """Evaluation loader over this rank's shard; combine results with :func:`all_reduce_sum`."""
    sampler = ShardSampler(len(dataset), env.rank, env.world_size)  # type: ignore[arg-type]
    return loader_cls(dataset, batch_size=batch_size, sampler=sampler, **loader_kwargs)


def all_reduce_sum(t: Tensor, env: DistEnv) -> Tensor:
    """Sum a tensor over ranks (identity for one process); returns a new tensor."""
    t = t.detach().clone()
    if env.distributed:
        dev_t = t.to(env.device)
        dist.all_reduce(dev_t, op=dist.ReduceOp.SUM)
        t = dev_t.to(t.device)
    return t


def broadcast_object(obj: Any, env: DistEnv, src: int = 0) -> Any:
    """Send a picklable object from ``src`` to every rank."""
    if not env.distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def gather_objects(obj: Any, env: DistEnv) -> list:
    """All ranks' objects, in rank order, on every rank."""
    if not env.distributed:
        return [obj]
    out: list = [None] * env.world_size
    dist.all_gather_object(out, obj)
    return out


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices) with the same seed."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)

