"""One service per state folder: an exclusive lock on its ``LOCK`` file."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from roadpubsub.roadnet.errors import RoadPubSubError

__all__ = ["ServiceBusyError", "lock_folder"]


class ServiceBusyError(RoadPubSubError, RuntimeError):
    """The state folder is held by another running service (its lock is taken)."""

    hint = "stop the other service, or give another --state"


def lock_folder(folder: Path) -> int:
    """An exclusive lock on the folder for this process (two services would corrupt it)."""
    fd = os.open(folder / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        os.close(fd)
        msg = f"{folder}: another roadpubsub service is running on this folder"
        raise ServiceBusyError(msg) from exc
    return fd
