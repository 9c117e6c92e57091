"""Output paths checked before any work: a report, an export or a plot onto a path that cannot be
written says so in one line, rather than failing with the raw OS error after the work is done.

The checks probe: they make what is missing and a file in it, then remove them. Asking
``os.access`` is not enough: it says yes to root everywhere, /proc and read-only mounts included,
and knows nothing of names too long for the file system."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from tracker.errors import TrackerError, shorten

PATH_ECHO = 200  # characters of a path an error repeats


def expand(path: str | Path, doing: str = "cannot use", error: type[TrackerError] = TrackerError) -> Path:
    """``path`` with a leading ~ or ~user expanded, as a shell would: the one place for --db and
    every output path alike (else '~x/out' makes a folder named '~x'). ``doing`` starts the error."""
    try:
        return Path(path).expanduser()
    except RuntimeError:  # ~user of no such user
        raise error(f"{doing} {shorten(str(path), PATH_ECHO)}: no such user's home directory") from None


def check_dir(out: str | Path) -> Path:
    """``out`` (~ expanded) as a directory that exists or can be created, and can be written.
    Nothing is left behind: a directory made to probe is removed again."""
    shown = _named(out, "directory")
    out = expand(out, "cannot write to")
    missing = _missing(out)
    existing = missing[0].parent if missing else out
    if not os.path.isdir(existing):
        raise TrackerError(f"cannot write to {shown}: {shorten(str(existing), PATH_ECHO)} is a file, not a directory")
    made: list[Path] = []
    into = existing  # the directory being written into when a step fails
    try:
        for directory in missing:
            into = directory.parent
            try:
                os.mkdir(directory)
            except FileExistsError:  # 'a/..': there already
                continue
            made.append(directory)
        into = out
        _probe_file(out)
    except OSError as exc:
        raise TrackerError(f"cannot write to {shown}: {_why(exc, into)}") from None
    finally:
        for directory in reversed(made):
            _quietly(os.rmdir, directory)
    return out


def check_file(path: str | Path, suffixes: tuple[str, ...] | None) -> Path:
    """``path`` (~ expanded) as a file of one of ``suffixes`` ('.png'; None: any) whose directory
    exists and can be written. An existing file is opened for writing and left as it was; a new
    one is created and removed."""
    shown = _named(path, "file")
    path = expand(path, "cannot write")
    if suffixes is not None and path.suffix.lower() not in suffixes:
        raise TrackerError(f"cannot write {shown}: name a {', '.join(suffixes)} file")
    if os.path.isdir(path):
        raise TrackerError(f"cannot write {shown}: it is a directory")
    parent = path.parent
    if not os.path.isdir(parent):
        raise TrackerError(f"cannot write {shown}: directory {shorten(str(parent), PATH_ECHO)} does not exist")
    exists = os.path.lexists(path)
    try:
        if exists:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # no O_TRUNC: it keeps its bytes and times
        else:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            os.unlink(path)
    except OSError as exc:
        raise TrackerError(f"cannot write {shown}: {_why(exc, path if exists else parent)}") from None
    return path


def _named(path: str | Path, what: str) -> str:
    """The path as errors show it; an empty one is refused (Path('') is '.', the current folder)."""
    if not str(path).strip():
        raise TrackerError(f"the output path is empty: name a {what}")
    return shorten(str(path), PATH_ECHO)


def _why(exc: OSError, directory: Path) -> str:
    """'/proc is not writable (No such file or directory)'; a name too long says just that."""
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT):
        return f"{shorten(str(directory), PATH_ECHO)} is not writable ({exc.strerror})"
    return exc.strerror or str(exc)


def _missing(path: Path) -> list[Path]:
    """The directories from the first missing one down to ``path``, outermost first; [] if it exists.
    os.path.lexists, not Path.exists: a name too long for the file system is missing, not an error."""
    missing = []
    while not os.path.lexists(path) and path.parent != path:
        missing.append(path)
        path = path.parent
    return missing[::-1]


def _probe_file(directory: Path) -> None:
    fd, name = tempfile.mkstemp(prefix=".tracker-probe-", dir=directory)
    os.close(fd)
    os.unlink(name)


def _quietly(remove, path: Path) -> None:
    try:
        remove(path)
    except OSError:
        pass


# What a folder of tracker's output holds, written beside it: the output (say "run 1's report") and
# the store it came from, and the files it wrote. The next writer into the folder reads it to know
# whether it is updating the same output or would mix two (tracker report, tracker export).
MARKER = ".tracker-output.json"


def claim(out: Path, what: str, db: str, force: bool) -> list[Path]:
    """Check that ``out`` may take ``what`` (e.g. "run 1's report") of the store ``db`` before the
    work: a new or empty folder, or one holding the same output (an update), may; one holding
    another output, or files tracker did not write, is refused in one line unless ``force``.
    Returns the files the earlier output there wrote (its marker's list), for the writer to
    remove what it does not write again; files tracker did not write are never listed."""
    earlier = _marker(out)
    if earlier is not None and (earlier.get("what"), earlier.get("db")) == (what, db):
        return _listed(out, earlier)
    if earlier is None and not (out.is_dir() and any(out.iterdir())):
        return []
    if not force:
        held = f"{earlier.get('what')} of {earlier.get('db')}" if earlier else "files tracker did not write"
        raise TrackerError(
            f"{shorten(str(out), PATH_ECHO)} holds {held}: name another --out, or add --force to write {what} there"
        )
    return _listed(out, earlier) if earlier else []


def mark(out: Path, what: str, db: str, written: list[Path]) -> None:
    """Record in ``out`` that it holds ``what`` of ``db``, made of ``written``: what ``claim`` reads."""
    import json

    names = sorted(str(path.relative_to(out)) for path in written)
    (out / MARKER).write_text(json.dumps({"what": what, "db": db, "files": names}, indent=1) + "\n")


def _marker(out: Path) -> dict | None:
    import json

    try:
        found = json.loads((out / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def _listed(out: Path, marker: dict) -> list[Path]:
    """The files a marker lists that are there, each inside ``out`` (a name with '..' is skipped)."""
    names = [name for name in marker.get("files", []) if isinstance(name, str)]
    paths = [out / name for name in names if ".." not in Path(name).parts and not Path(name).is_absolute()]
    return [path for path in paths if path.is_file()]
