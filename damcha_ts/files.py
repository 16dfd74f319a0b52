"""Writing files so that a reader, or a rerun after a kill, never sees half of one."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def write_atomically(path: str | Path, content: bytes | str) -> Path:
    """Write ``content`` to a temp file beside ``path``, fsync it, ``os.replace`` it over ``path`` and
    fsync the folder. A crash leaves either the old file or the new one, never a mix. Two writers
    racing on one path need a lock around the read-modify-write (see ``leaderboard/results.py``)."""
    path = Path(path)
    data = content.encode("utf-8") if isinstance(content, str) else content
    try:
        descriptor, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:  # name the file asked for, not the temp file beside it
        raise type(exc)(exc.errno, f"cannot write {path}: {exc.strerror}") from exc
    try:
        os.fchmod(descriptor, 0o644)  # mkstemp makes 0600; results are for everyone to read
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp_name, path)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)  # make the rename itself durable
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return path


def same_file(a: str | Path, b: str | Path) -> bool:
    """The same path once ``~`` and links are resolved (``./x`` and ``x``, a symlink and its
    target), or the same file under another name (a hard link)."""
    a, b = Path(a).expanduser(), Path(b).expanduser()
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist: they are not the same file
        return False


def save_figure(figure, path: str | Path, **savefig_kwargs) -> Path:
    """``figure.savefig`` through :func:`write_atomically` (the format from the file's suffix)."""
    import io

    path = Path(path)
    buffer = io.BytesIO()
    figure.savefig(buffer, format=path.suffix.lstrip(".") or "png", **savefig_kwargs)
    return write_atomically(path, buffer.getvalue())


@contextlib.contextmanager
def locked_folder(folder: str | Path, *, wait: bool = True) -> Iterator[bool]:
    """An advisory ``flock`` on a folder, held until the block ends; yields whether it is held.
    A folder, not a file: files replaced with ``os.replace`` change inode, and a lock file would
    lie beside the results. ``wait=False`` yields False at once when another process holds it."""
    import fcntl

    descriptor = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
        else:
            yield True
    finally:
        os.close(descriptor)  # closing releases the lock
