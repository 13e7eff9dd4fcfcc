"""Run directories that a crash, a second process or a planted symlink cannot corrupt.

Every command that writes a training run (the parser, the trace-norm parser, NLI, RL, the
benchmark runners) writes it through this module, which guarantees:

- **one writer**: :class:`RunLock` holds an exclusive lock on ``{logdir}/.lock`` for the life
  of the writing process. A second writer is refused with a :class:`RunLockedError` naming
  the holder's pid. The lock is an OS file lock (``flock``), released by the kernel when its
  process dies, so a lock left by a killed process is stale by construction: the next writer
  takes it over (and says so in :attr:`RunLock.previous_holder`);
- **whole files**: a file is rewritten by writing a temporary file in the same directory and
  renaming it over the old one (``os.replace``), never by truncating and writing in place
  (:func:`write_bytes`, :func:`write_text`, :func:`write_json`, :func:`write_csv`,
  :func:`save_file`): a process killed at any moment leaves the old file or the new one,
  and the next writer to take the lock deletes its temporary file (:func:`remove_temporaries`);
  each temporary file is locked while it is written, so that a file a killed writer left is
  told apart from a live writer's;
  logs that only grow are appended to (:func:`open_for_appending`), never rewritten; a folder
  of files (a checkpoint) is written beside the old one and swapped in by two renames
  (:func:`save_directory`), and a swap a kill left half done is finished or undone
  (:func:`recover_directory`);
- **no symlinks**: writing refuses a target that is a symlink, or that lies under a symlinked
  folder inside the run directory, with an :class:`UnsafePathError`; the temporary files are
  created with ``O_EXCL``, so a planted name cannot redirect them either;
- **no leftovers**: the lock file is deleted when the lock is released, and so is the run
  directory that taking the lock created, if nothing was written there; a lock file a killed
  process left is taken over, and deleted, by the next writer.

A command's output file that the user names (``parse --output``, a figure) is no part of a run
directory: :func:`save_output_file` follows the symlinks of its path, writes the file whole
beside its real target, and first deletes the temporary files that a killed writer of the same
file left there.

Example:
    >>> import tempfile
    >>> logdir = tempfile.mkdtemp()
    >>> with RunLock(logdir):
    ...     write_json(f"{logdir}/config.json", {"seed": 0})
    ...     write_csv(f"{logdir}/progress.csv", ["epoch", "loss"], [[1, 0.5]])
    >>> read_csv(f"{logdir}/progress.csv")
    (['epoch', 'loss'], [['1', '0.5']])
"""

from __future__ import annotations

import contextlib
import csv
import glob
import io
import json
import os
import pathlib
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None
    import msvcrt

#: The lock file of a run directory.
LOCK_FILE = ".lock"
#: The suffixes of the folder :func:`save_directory` writes and of the one it replaces.
NEXT_SUFFIX, PREVIOUS_SUFFIX = ".next", ".previous"
#: The names of :func:`save_file`'s temporary files: ``.{stem}.{8 random characters}.tmp{suffix}``.
_TEMPORARY = re.compile(r"^\..*\.[a-z0-9_]{8}\.tmp(\.[^.]*)?$")


class RunLockedError(RuntimeError):
    """Another live process is writing the run directory (the message names its pid)."""


class UnsafePathError(OSError):
    """A write inside a run directory would follow a symlink."""


def _refuse_symlinks(path: pathlib.Path) -> None:
    """Raise :class:`UnsafePathError` when ``path`` or its parent folder is a symlink."""
    for candidate in (path, path.parent):
        if candidate.is_symlink():
            raise UnsafePathError(
                f"Refusing to write through a symlink in a run directory ({str(candidate)!r} points "
                f"to {os.readlink(candidate)!r}): remove it, or choose another logdir. "
                f"Received: path={str(path)!r}"
            )


def _temporary_path(path: pathlib.Path) -> tuple[int, pathlib.Path]:
    """A new, empty file beside ``path``, created with ``O_EXCL`` (its suffix is ``path``'s),
    with the permissions of a file that ``open`` creates (``mkstemp`` makes it owner-only):
    ``(handle, path)``, the open handle holding a lock on it until it is closed, which tells a
    live writer's file from one a killed writer left (:func:`save_output_file`)."""
    handle, name = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}", dir=path.parent)
    _lock(handle)
    if hasattr(os, "fchmod"):  # POSIX
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(handle, 0o666 & ~umask)
    return handle, pathlib.Path(name)


def remove_temporaries(logdir: str | os.PathLike) -> list[pathlib.Path]:
    """Delete the temporary files that writers killed mid-write left in ``logdir`` (and its
    subfolders); call it only while holding the directory's :class:`RunLock` (taking the
    lock does).

    Returns:
        The files deleted.
    """
    removed = []
    for path in pathlib.Path(logdir).rglob(".*.tmp*"):
        if _TEMPORARY.match(path.name) and path.is_file() and not path.is_symlink():
            path.unlink()
            removed.append(path)
    return removed


def save_file(path: str | os.PathLike, write: Callable[[pathlib.Path], Any]) -> None:
    """Write a file whole: ``write(temporary)`` then rename the temporary file over ``path``.

    For writers that need a file name (``model.save``, ``np.savez``): the temporary file
    lies beside ``path`` and has its suffix.

    Args:
        path: the file to (re)write; neither it nor its folder may be a symlink.
        write: called with the temporary path, writes the file's content there.

    Raises:
        UnsafePathError: ``path`` or its folder is a symlink.
    """
    path = pathlib.Path(path)
    _refuse_symlinks(path)
    locked, temporary = _temporary_path(path)
    try:
        write(temporary)
        with open(temporary, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    finally:
        os.close(locked)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` whole (see :func:`save_file`)."""
    save_file(path, lambda temporary: temporary.write_bytes(data))


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` whole (see :func:`save_file`)."""
    write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike, value: Any) -> None:
    """Write ``value`` as indented JSON to ``path`` whole (see :func:`save_file`)."""
    write_text(path, json.dumps(value, indent=1) + "\n")


def write_csv(path: str | os.PathLike, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Write a CSV file (a header, then ``rows``) to ``path`` whole (see :func:`save_file`).

    A crash leaves the old file or the new one, never an empty or half-written file (a
    progress log is written so when it opens: :class:`keras_structured.progress_log.ProgressLog`).
    """
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    writer.writerow(columns)
    writer.writerows(rows)
    write_text(path, buffer.getvalue())


def read_text(path: str | os.PathLike) -> str:
    """The text of a UTF-8 file that a run wrote (and someone may have edited): a byte-order
    mark is skipped.

    Raises:
        ValueError: the file is not UTF-8 (the message names the file, the line and the byte).
    """
    data = pathlib.Path(path).read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise ValueError(
            f"{str(path)!r} is not UTF-8 text. Received: the byte {data[error.start]:#04x} on line {line}"
        ) from None


def read_csv(path: str | os.PathLike) -> tuple[list[str], list[list[str]]]:
    """The header and the rows of a CSV file (``([], [])`` for an empty file).

    A last row cut short by a crash while it was appended (the file does not end with a
    line break) is left out: its cells could read as other numbers (``10`` for ``1024``).
    A byte-order mark and blank lines (an editor's) are skipped.

    Raises:
        ValueError: the file is not UTF-8 (:func:`read_text`), or a row has more or fewer
            cells than the header (the file was edited, or cut inside): the message names the
            file, the line and what it holds.
    """
    text = read_text(path)
    reader = csv.reader(io.StringIO(text[: text.rfind("\n") + 1], newline=""))
    rows = []
    for row in reader:
        if not row:
            continue
        if rows and len(row) != len(rows[0]):
            raise ValueError(
                f"{str(path)!r} line {reader.line_num} has {len(row)} cells, and its header "
                f"{len(rows[0])} ({','.join(rows[0])}). Received: {','.join(row)!r}"
            )
        rows.append(row)
    return (rows[0], rows[1:]) if rows else ([], [])


def open_for_appending(path: str | os.PathLike) -> BinaryIO:
    """Open ``path`` for appending bytes (created if missing), refusing a symlink.

    For logs that only grow (a process's output): nothing written before is ever rewritten.

    Raises:
        UnsafePathError: ``path`` or its folder is a symlink.
    """
    path = pathlib.Path(path)
    _refuse_symlinks(path)
    try:
        handle = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError:  # a symlink planted since the check (O_NOFOLLOW: ELOOP)
        _refuse_symlinks(path)
        raise
    return os.fdopen(handle, "ab")


def make_directory(path: str | os.PathLike) -> pathlib.Path:
    """Create the folder ``path`` (and its parents) unless it exists; refuse a symlink.

    Raises:
        UnsafePathError: ``path`` is a symlink.
    """
    path = pathlib.Path(path)
    if path.is_symlink():
        _refuse_symlinks(path)
    path.mkdir(parents=True, exist_ok=True)
    return path


def save_output_file(
    path: str | os.PathLike, write: Callable[[pathlib.Path], Any], *, follow_file_link: bool = True
) -> pathlib.Path:
    """Write a command's output file, a path the user named outside any run directory, whole.

    The path is the user's: symlinks among its folders, or a symlink that is the file itself,
    are followed (``~/data`` may be a link to another disk), and the file is written whole
    (:func:`save_file`) at the real path, its folders created. The temporary files that a
    killed writer of the same file left beside it are deleted first (a live writer's, which
    it holds locked, are left alone).

    Args:
        path: the file to (re)write.
        write: called with a temporary path beside the real file, with its suffix.
        follow_file_link: whether a symlink that is the file itself is followed; if False it
            is refused (:class:`UnsafePathError`), for commands that overwrite their output
            without being asked (``rl plot``), so as not to change the file it points to.

    Returns:
        The real path written, a ``pathlib.Path``.
    """
    if not follow_file_link and pathlib.Path(path).is_symlink():
        raise UnsafePathError(
            f"Refusing to write through a symlink: {str(path)!r} points to {os.readlink(path)!r}, which "
            f"it would overwrite; name the file itself. Received: path={str(path)!r}"
        )
    target = pathlib.Path(path).resolve()
    make_directory(target.parent)
    pattern = re.compile(re.escape(f".{target.stem}.") + r"[a-z0-9_]{8}" + re.escape(f".tmp{target.suffix}"))
    for leftover in target.parent.glob(f".{glob.escape(target.stem)}.*.tmp{glob.escape(target.suffix)}"):
        if pattern.fullmatch(leftover.name) and leftover.is_file() and not leftover.is_symlink():
            _remove_unlocked(leftover)
    save_file(target, write)
    return target


def _remove_unlocked(path: pathlib.Path) -> None:
    """Delete the file ``path`` unless a live process holds a lock on it."""
    handle = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        _lock(handle)
    except OSError:  # a live writer's
        return
    else:
        path.unlink(missing_ok=True)
    finally:
        os.close(handle)


def _swap_folders(path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """The folders ``{path}.next`` and ``{path}.previous`` of a swap (:func:`save_directory`)."""
    return path.with_name(path.name + NEXT_SUFFIX), path.with_name(path.name + PREVIOUS_SUFFIX)


def save_directory(path: str | os.PathLike, write: Callable[[pathlib.Path], Any]) -> pathlib.Path:
    """Write a folder whole: ``write`` fills ``{path}.next/``, which then replaces ``path``.

    The old folder is renamed ``{path}.previous/``, ``{path}.next/`` renamed ``path`` and the
    old one deleted: a process killed at any moment leaves the old folder or the new one,
    possibly beside a leftover that :func:`recover_directory` clears (call it before reading
    ``path``, while holding the directory's :class:`RunLock`).

    Args:
        path: the folder to (re)write; neither it, its swap folders nor its parent may be a
            symlink.
        write: called with the new folder (created, empty); writes the files there (with
            :func:`save_file` and the like, so that each is on disk before the swap).

    Returns:
        ``path``, a ``pathlib.Path``.

    Raises:
        UnsafePathError: a symlink among the folders.

    Example:
        >>> import tempfile
        >>> folder = pathlib.Path(tempfile.mkdtemp()) / "checkpoint"
        >>> _ = save_directory(folder, lambda new: write_json(new / "state.json", {"epoch": 1}))
        >>> _ = save_directory(folder, lambda new: write_json(new / "state.json", {"epoch": 2}))
        >>> json.loads((folder / "state.json").read_text()), sorted(p.name for p in folder.parent.iterdir())
        ({'epoch': 2}, ['checkpoint'])
    """
    path = pathlib.Path(path)
    written, previous = _swap_folders(path)
    for folder in (path, written, previous):
        _refuse_symlinks(folder)
    shutil.rmtree(written, ignore_errors=True)  # a killed writer's
    written.mkdir()
    try:
        write(written)
    except BaseException:
        shutil.rmtree(written, ignore_errors=True)
        raise
    if path.exists():
        path.rename(previous)
    written.rename(path)
    shutil.rmtree(previous, ignore_errors=True)
    return path


def recover_directory(path: str | os.PathLike) -> None:
    """Finish or undo a swap of :func:`save_directory` that a killed process left half done.

    Killed between the renames (no ``path``, a ``{path}.previous/``), the previous folder is
    put back; any leftover ``{path}.next/`` or ``{path}.previous/`` is deleted.

    Args:
        path: the folder.
    """
    path = pathlib.Path(path)
    written, previous = _swap_folders(path)
    if previous.is_dir() and not previous.is_symlink() and not os.path.lexists(path):
        previous.rename(path)
    for leftover in (written, previous):
        if leftover.is_symlink():
            leftover.unlink()
        elif leftover.exists():
            shutil.rmtree(leftover)


class RunLock:
    """An exclusive lock on a run directory for one writing process.

    Use it as a context manager (or call :meth:`acquire` and :meth:`release`). The directory
    is created if missing. The lock file records the holder's pid; the lock itself is the
    kernel's, so it dies with its process. Releasing the lock deletes the lock file, and the
    directory (with the folders above it) if taking the lock created it and it is empty: a
    run that failed before writing anything leaves nothing. A lock file that a killed process
    left is taken over by the next writer, which deletes it in turn.

    Args:
        logdir: the run directory.

    Raises:
        RunLockedError: another process (or another lock in this one) holds the directory.
        UnsafePathError: the lock file is a symlink.

    Attributes:
        previous_holder: the pid recorded by a dead process whose lock was taken over, or None.
    """

    def __init__(self, logdir: str | os.PathLike):
        self.logdir = pathlib.Path(logdir)
        self.previous_holder: int | None = None
        self._handle: int | None = None
        self._created: list[pathlib.Path] = []  # the folders that acquire made, deepest first

    @property
    def path(self) -> pathlib.Path:
        """The lock file."""
        return self.logdir / LOCK_FILE

    def acquire(self) -> RunLock:
        """Take the lock (see the class docstring for the errors)."""
        created, folder = [], self.logdir.absolute()
        while not os.path.lexists(folder):
            created.append(folder)
            folder = folder.parent
        while True:
            make_directory(self.logdir)
            _refuse_symlinks(self.path)
            try:
                handle = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
            except FileNotFoundError:  # a holder that had made the folder deleted it on release: again
                continue
            try:
                _lock(handle)
            except OSError:
                os.close(handle)
                holder = _recorded_pid(self.path)
                raise RunLockedError(
                    f"Another process (pid {holder}) is writing this run directory; wait for it to end "
                    f"or choose another logdir. Received: logdir={str(self.logdir)!r}"
                ) from None
            if _is_open_file(handle, self.path):
                break
            os.close(handle)  # a holder deleted the file it released after it was opened here: again
        self._created = created
        recorded = os.read(handle, 64).decode("ascii", "replace").strip()
        self.previous_holder = int(recorded) if recorded.isdigit() else None
        os.lseek(handle, 0, os.SEEK_SET)
        os.ftruncate(handle, 0)
        os.write(handle, f"{os.getpid()}\n".encode())
        self._handle = handle
        remove_temporaries(self.logdir)
        return self

    def release(self) -> None:
        """Release the lock, deleting the lock file and the folders :meth:`acquire` created
        if they are empty."""
        if self._handle is not None:
            os.ftruncate(self._handle, 0)
            if fcntl is not None:  # deleted while held: acquire checks that it locked the file there
                with contextlib.suppress(OSError):  # a folder it may not write in: the file stays, empty
                    self.path.unlink(missing_ok=True)
            os.close(self._handle)  # closing releases the kernel's lock
            self._handle = None
            for folder in self._created:
                try:
                    folder.rmdir()
                except OSError:  # written in, or not empty
                    break
            self._created = []

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._handle is not None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exception) -> None:
        self.release()


def _lock(handle: int) -> None:
    """Lock the open file ``handle`` exclusively without waiting (OSError when held)."""
    if fcntl is not None:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    else:  # pragma: no cover - Windows
        msvcrt.locking(handle, msvcrt.LK_NBLCK, 1)


def _is_open_file(handle: int, path: pathlib.Path) -> bool:
    """Whether ``path`` is the file open as ``handle`` (not deleted or replaced since)."""
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return False
    opened = os.fstat(handle)
    return (found.st_dev, found.st_ino) == (opened.st_dev, opened.st_ino)


def _recorded_pid(path: pathlib.Path) -> str:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip() or "unknown"
    except OSError:
        return "unknown"


__all__ = [
    "LOCK_FILE",
    "RunLock",
    "RunLockedError",
    "UnsafePathError",
    "NEXT_SUFFIX",
    "PREVIOUS_SUFFIX",
    "make_directory",
    "recover_directory",
    "open_for_appending",
    "read_csv",
    "read_text",
    "remove_temporaries",
    "save_directory",
    "save_file",
    "save_output_file",
    "write_bytes",
    "write_csv",
    "write_json",
    "write_text",
]
