"""Training infrastructure: torchrun/DDP set-up, resumable checkpoints, metric logging, an epoch loop."""
from .checkpoint import load_checkpoint, load_weights, save_checkpoint
from .ddp import (DistEnv, all_reduce_sum, cleanup, eval_loader, init_distributed, require_single_process,
                  seed_everything, train_loader, unwrap, wrap_model)
from .logging import MetricsLogger, plot_learning_curves
from .trainer import AMP_DTYPES, add_amp_argument, fit

__all__ = ["DistEnv", "init_distributed", "cleanup", "wrap_model", "unwrap", "train_loader", "eval_loader",
           "all_reduce_sum", "require_single_process", "seed_everything", "save_checkpoint", "load_checkpoint",
           "load_weights", "MetricsLogger", "plot_learning_curves", "fit", "AMP_DTYPES",
           "add_amp_argument"]
