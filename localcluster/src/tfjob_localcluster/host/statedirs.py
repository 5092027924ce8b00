"""One run's state directory in the cache, and what is left of it once the run is over.

A run (a test session, a benchmark) keeps its clusters' state under
`<cache>/<kind>/<prefix>*/`. A passing run removes it; a failing run keeps it for reading
(logs, etcd, pod logs) but not the gigabytes that are only images: each node's unpacked
containerd store and a registry's blobs. A run that was killed removes nothing: the next
run of that kind finds its directory unlocked and unmarked, and removes it.

Liveness is an flock the run holds on `<dir>/.owner` for as long as its process lives;
`<dir>/.kept` marks a directory a failed run kept on purpose. Of those, the newest
KEPT_AT_MOST of each kind stay.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import time
from pathlib import Path

from tfjob_localcluster.binaries import cache_root

KEPT_AT_MOST = 3
#: A directory younger than this without its lock may be one another run is making.
MAKING = 60.0
OWNER = ".owner"
KEPT = ".kept"
#: What a kept directory drops: reproducible images, none of the diagnostics.
IMAGE_STORES = ("*/node/var-lib/containerd", "registry/data")

_held: dict[Path, int] = {}


def new_state_dir(kind: str, prefix: str) -> Path:
    """A new directory of one run's state under the cache's `kind`/ (0700), locked as this
    process's; directories of killed runs of that kind are removed first."""
    parent = cache_root() / kind
    parent.mkdir(parents=True, exist_ok=True)
    sweep(parent, prefix)
    directory = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    fd = os.open(directory / OWNER, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    _held[directory] = fd
    return directory


def keep(directory: Path) -> None:
    """Marks a failed run's directory as kept and drops its image stores."""
    (directory / KEPT).touch()
    drop_image_stores(directory)


def remove(directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)
    fd = _held.pop(directory, None)
    if fd is not None:
        os.close(fd)


def drop_image_stores(directory: Path) -> None:
    for pattern in IMAGE_STORES:
        for store in directory.glob(pattern):
            shutil.rmtree(store, ignore_errors=True)


def sweep(parent: Path, prefix: str) -> list[Path]:
    """Removes the directories of killed runs and all but the newest kept ones; returns
    what it removed. A directory whose owner still runs is left alone."""
    removed: list[Path] = []
    kept: list[Path] = []
    for directory in sorted(parent.glob(f"{prefix}*")):
        if not directory.is_dir() or _owner_alive(directory):
            continue
        if (directory / KEPT).exists():
            kept.append(directory)
        else:
            removed.append(directory)
    kept.sort(key=lambda d: (d / KEPT).stat().st_mtime, reverse=True)
    removed += kept[KEPT_AT_MOST:]
    for directory in removed:
        shutil.rmtree(directory, ignore_errors=True)
    for directory in kept[:KEPT_AT_MOST]:
        drop_image_stores(directory)
    return removed


def _owner_alive(directory: Path) -> bool:
    if directory in _held:
        return True
    try:
        fd = os.open(directory / OWNER, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return time.time() - directory.stat().st_mtime < MAKING
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
