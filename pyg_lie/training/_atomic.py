"""Atomic file writes: a temporary file in the target's folder, flushed to disk, then renamed
over the target with ``os.replace``, so that a run killed at any moment leaves either the old
file or the new one, never a truncated mix."""
from __future__ import annotations

import os
import uuid
from contextlib import contextmanager
from typing import IO, Iterator

__all__ = ["atomic_open", "atomic_write_text"]


@contextmanager
def atomic_open(path: str, mode: str = "w", **kwargs) -> Iterator[IO]:
    """``open(path, mode)`` for writing whose content replaces ``path`` only when the block ends
    without an exception (the temporary file is removed otherwise)."""
    if not mode.startswith("w"):
        raise ValueError(f"atomic_open writes whole files: mode must start with 'w', got {mode!r}")
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    # os.open with 0o666 (not mkstemp's 0o600): the file gets the permissions the umask gives
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, mode, **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str, text: str) -> None:
    """Replace ``path``'s content with ``text`` atomically."""
    with atomic_open(path, "w") as f:
        f.write(text)
