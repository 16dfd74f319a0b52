"""Finding, downloading and verifying benchmark files.

Search order (``locate_dataset``): an explicit path, then ``$DAMCHA_TS_DATA``, then the cache
directory, then a download into the cache. ``.csv`` and ``.csv.gz`` both count; the registry's
sha256 is always the digest of the *uncompressed* CSV, so a gzip copy verifies like the original.

Cache directory (``cache_dir``): ``$DAMCHA_TS_CACHE`` if set; else ``datasets/`` when running from a
source checkout (its data files are git-ignored); else ``$XDG_CACHE_HOME/damcha_ts`` (by default
``~/.cache/damcha_ts``).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import http.client
import os
import socket
import uuid
import warnings
import zlib
from collections.abc import Iterator
from pathlib import Path

from damcha_ts.data.registry import DataWarning, DatasetSpec, get_spec
from damcha_ts.errors import ChecksumError, DatasetNotFoundError

DATA_ENV = "DAMCHA_TS_DATA"
CACHE_ENV = "DAMCHA_TS_CACHE"
# Seconds without a byte from the server before a download attempt is abandoned.
DOWNLOAD_TIMEOUT_S = 60.0

_CHUNK = 1 << 20
# sha256 of files already hashed in this process, keyed by (path, size, mtime): loading a
# benchmark verifies it, and verifying ETTm1 twice in a row should cost nothing the second time.
_digest_memo: dict[tuple[str, int, int], str] = {}


def cache_dir() -> Path:
    """The directory downloads go to (and the last place searched before downloading)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "datasets").is_dir():
        return checkout / "datasets"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "damcha_ts"


def open_csv(path: str | os.PathLike) -> contextlib.AbstractContextManager:
    """Open a ``.csv`` or ``.csv.gz`` file for binary reading, decompressing transparently."""
    path = Path(path)
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


# What reading a damaged file raises: a cut-off or non-gzip .gz gives EOFError, BadGzipFile (an
# OSError) or zlib.error.
_UNREADABLE = (EOFError, OSError, zlib.error)


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 hex digest of the CSV content (decompressed first for ``.gz``), memoised per file."""
    path = Path(path).resolve()
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _digest_memo:
        digest = hashlib.sha256()
        with open_csv(path) as handle:
            for chunk in iter(lambda: handle.read(_CHUNK), b""):
                digest.update(chunk)
        _digest_memo[key] = digest.hexdigest()
    return _digest_memo[key]


def verify_file(path: str | os.PathLike, spec: DatasetSpec | str) -> str:
    """Check ``path`` against the registry digest; returns the actual digest.

    Raises ChecksumError (naming both digests) on a mismatch. When the registry has no digest
    for the dataset, warns that the file cannot be verified and returns the actual digest.
    """
    spec = get_spec(spec)
    try:
        actual = file_sha256(path)
    except _UNREADABLE as exc:
        raise ChecksumError(
            f"{spec.name}: {path} cannot be read ({type(exc).__name__}: {exc}), e.g. a cut-off download; "
            f"it was not used. Delete it or replace it with the canonical file (see datasets/{spec.name}.md)."
        ) from exc
    if spec.sha256 is None:
        problem = _shape_problem(Path(path), spec)
        if problem is not None:
            raise ChecksumError(f"{spec.name}: {path} is not the benchmark file: {problem}; it was not used.")
        warnings.warn(
            f"{spec.name}: the registry has no sha256 for {spec.filename}, so {path} cannot be "
            f"verified beyond its shape (its sha256 is {actual}).",
            DataWarning, stacklevel=2,
        )
    elif actual != spec.sha256:
        raise ChecksumError(
            f"{spec.name}: checksum mismatch for {path}: expected sha256 {spec.sha256}, got {actual}. "
            "The file is corrupt or a different version; it was not used. Delete it or replace it "
            "with the canonical file (see datasets/" + spec.name + ".md)."
        )
    return actual


def checksum_status(path: str | os.PathLike, spec: DatasetSpec | str) -> dict[str, str | None]:
    """``{"status": "verified"|"mismatch"|"unverifiable"|"unreadable", "expected": ..., "actual": ...}``."""
    spec = get_spec(spec)
    try:
        actual = file_sha256(path)
    except _UNREADABLE:
        return {"status": "unreadable", "expected": spec.sha256, "actual": None}
    if spec.sha256 is None:
        status = "unverifiable"
    else:
        status = "verified" if actual == spec.sha256 else "mismatch"
    return {"status": status, "expected": spec.sha256, "actual": actual}


def _candidates(spec: DatasetSpec, directory: Path) -> list[Path]:
    # Flat layout (``DIR/ETTh1.csv``) first, then the TSLib ``./dataset`` layout (``DIR/ETT-small/...``).
    folders = [directory] + ([directory / spec.subdir] if spec.subdir else [])
    return [folder / name for folder in folders for name in (spec.filename, spec.filename + ".gz")]


def _search_dirs() -> list[tuple[str, Path]]:
    dirs = []
    if os.environ.get(DATA_ENV):
        dirs.append((f"${DATA_ENV}", Path(os.environ[DATA_ENV]).expanduser()))
    dirs.append(("cache", cache_dir()))
    return dirs


def how_to_provide(spec: DatasetSpec) -> str:
    """How to provide a benchmark file that is missing or fails its checksum: where to get it, where
    to put it, and what it must hold. Every error about such a file carries it, and the leaderboard's
    messages about missing or corrupt files use it too."""
    checksum = (f"sha256 of the uncompressed CSV {spec.sha256} (from the damcha_ts registry)"
                if spec.sha256 else "the registry records no sha256 for it")
    return (
        f"To provide it: download {spec.urls[0]} yourself and either pass its path, put it (or a "
        f"gzip copy, {spec.filename}.gz) in a directory named by ${DATA_ENV}, or put it in the "
        f"cache directory {cache_dir()}. Expected: {spec.n_rows} rows x {spec.n_variates} variates "
        f"(+ date), {checksum}."
        + (f" Other sources: {', '.join(spec.urls[1:])}." if len(spec.urls) > 1 else "")
    )


def locate_dataset(name: str | DatasetSpec, path: str | os.PathLike | None = None, *, download: bool = True) -> Path:
    """Find a verified copy of benchmark ``name`` and return its path.

    ``path`` may be the file itself or a directory holding it. Without ``path`` the search goes
    ``$DAMCHA_TS_DATA`` -> cache directory -> download (when ``download`` is true). A file whose
    checksum does not match is never used: with an explicit path that is a ChecksumError; during
    the search it is skipped with a warning. When nothing is found, DatasetNotFoundError lists
    every place searched and says how to provide the file.
    """
    spec = get_spec(name)
    if path is not None:
        return _at_given_path(spec, Path(path).expanduser())
    searched: list[str] = []
    rejected: list[ChecksumError] = []
    for label, directory in _search_dirs():
        for candidate in _candidates(spec, directory):
            searched.append(f"{candidate} ({label})")
            if not candidate.is_file():
                continue
            try:
                verify_file(candidate, spec)
            except ChecksumError as exc:
                rejected.append(exc)
                warnings.warn(f"{exc} Looking further.", DataWarning, stacklevel=2)
                continue
            return candidate

    failures: list[str] = []
    if download:
        try:
            return download_dataset(spec)
        except ChecksumError as exc:  # a download that does not verify joins the rejected files
            rejected.append(exc)
        except DatasetNotFoundError as exc:
            failures.append(str(exc))
    else:
        failures.append("downloading was disabled (download=False)")
    places = "\n  ".join(searched)
    message = (
        f"{spec.name}: {spec.filename} was not found. Searched:\n  {places}\n"
        + "\n".join(failures)
        + f"\n{how_to_provide(spec)}"
    )
    if rejected:
        raise ChecksumError(message + "\nFiles rejected for a wrong checksum:\n  " + "\n  ".join(map(str, rejected)),
                            rejected=tuple(rejected))
    raise DatasetNotFoundError(message)


def _at_given_path(spec: DatasetSpec, given: Path) -> Path:
    """:func:`locate_dataset` with an explicit ``path``: the file itself, or the first copy in that
    directory that verifies (a bad ETTh1.csv must not hide a good ETTh1.csv.gz)."""
    if given.is_dir():
        found = [c for c in _candidates(spec, given) if c.is_file()]
        if not found:
            listed = ", ".join(str(c) for c in _candidates(spec, given))
            raise DatasetNotFoundError(f"{spec.name}: none of {listed} exists. {how_to_provide(spec)}")
        for candidate in found[:-1]:
            try:
                verify_file(candidate, spec)
                return candidate
            except ChecksumError as exc:
                warnings.warn(f"{exc} Looking further.", DataWarning, stacklevel=3)  # locate_dataset's caller
        given = found[-1]
    elif not given.is_file():
        raise DatasetNotFoundError(f"{spec.name}: no such file: {given}. {how_to_provide(spec)}")
    verify_file(given, spec)
    return given


@contextlib.contextmanager
def _socket_timeout(seconds: float) -> Iterator[None]:
    # torch's download helper opens its URL without a timeout; an unreachable host would
    # otherwise hang forever instead of failing over to the next URL.
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(previous)


def _csv_shape(path: Path) -> tuple[int, int, int]:
    """(data rows, variates per header, fields on the last line) of a downloaded CSV."""
    with open_csv(path) as handle:
        lines = handle.read().splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        return 0, 0, 0
    return len(lines) - 1, lines[0].count(b","), lines[-1].count(b",")


def download_dataset(name: str | DatasetSpec, dest_dir: str | os.PathLike | None = None, *, progress: bool = True) -> Path:
    """Download benchmark ``name`` into ``dest_dir`` (default: ``cache_dir()``) and verify it.

    Each registry URL is tried in turn with torch's download helper (progress bar on stderr,
    writes through a temporary file). The result is checked (full sha256, or the registry's
    shape when no digest is known) under a temporary name and renamed to ``<dest_dir>/<filename>``
    only when it passes, so a good cached file is never replaced by a bad download and no
    partial file is left behind. Raises ChecksumError if every download was corrupt,
    DatasetNotFoundError if none could be fetched.
    """
    from torch.hub import download_url_to_file

    spec = get_spec(name)
    dest_dir = Path(dest_dir) if dest_dir is not None else cache_dir()
    dest_dir.mkdir(parents=True, exist_ok=True)
    final = dest_dir / spec.filename
    network_failures: list[str] = []
    corrupt: list[str] = []
    for url in spec.urls:
        temporary = dest_dir / f".{spec.filename}.{uuid.uuid4().hex}.download"
        try:
            with _socket_timeout(DOWNLOAD_TIMEOUT_S):
                download_url_to_file(url, str(temporary), progress=progress)
            problem = _downloaded_file_problem(temporary, spec)
            if problem is None:
                os.replace(temporary, final)
                return final
            corrupt.append(f"{url}: {problem}")
        except (OSError, http.client.HTTPException) as exc:  # URLError, timeouts, refused, cut off
            network_failures.append(f"{url}: {exc}")
        finally:
            temporary.unlink(missing_ok=True)
    if corrupt:
        raise ChecksumError(f"{spec.name}: every download was rejected, nothing was written to {final}:\n  " + "\n  ".join(corrupt + network_failures))
    raise DatasetNotFoundError(f"{spec.name}: download failed:\n  " + "\n  ".join(network_failures))


def _shape_problem(path: Path, spec: DatasetSpec) -> str | None:
    """Without a digest to compare, at least catch a truncated file by its shape."""
    rows, header_fields, last_fields = _csv_shape(path)
    if rows != spec.n_rows or header_fields != spec.n_variates or last_fields != header_fields:
        return (
            f"expected {spec.n_rows} rows x {spec.n_variates} variates, got {rows} rows, "
            f"{header_fields} variates in the header and {last_fields} on the last line (truncated?)"
        )
    return None


def _downloaded_file_problem(path: Path, spec: DatasetSpec) -> str | None:
    actual = file_sha256(path)
    if spec.sha256 is not None:
        return None if actual == spec.sha256 else f"expected sha256 {spec.sha256}, got {actual}"
    problem = _shape_problem(path, spec)
    if problem is not None:
        return problem
    warnings.warn(
        f"{spec.name}: downloaded without checksum verification (the registry has no sha256; its "
        f"sha256 is {actual}).",
        DataWarning, stacklevel=3,
    )
    return None
