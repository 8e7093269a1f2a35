"""The folder ``harnessx demo`` works in, and the only files it ever deletes.

A demo folder is one the demo created, or adopted while it was empty: it holds a marker
file saying so. Starting again deletes the files a previous demo left there (their names
are fixed, below), nothing else; a folder without the marker is refused unless it is empty,
and the current directory (or one of its parents) is never used at all.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from harnessx._errors import ConfigurationError
from harnessx._pool_demo import REGIONS

__all__ = ["MARKER", "prepare_demo_dir"]

MARKER = ".harnessx-demo"
_MARKER_TEXT = (
    "This folder was created by 'harnessx demo'; the next demo run clears the files it wrote here.\n"
)

_DEMO_FOLDERS = ("runtime.sqlite3.owners", "pool.sqlite3.owners", "reports", "logs")


def _demo_files() -> list[str]:
    """Every file either walkthrough writes, relative to its folder (only the liveness locks
    have names of their own); a user's file in a demo folder never matches one of these."""
    names = [f"{db}{suffix}" for db in ("runtime.sqlite3", "pool.sqlite3") for suffix in ("", "-wal", "-shm")]
    names += ["runtime.sqlite3.owners/*.lock", "pool.sqlite3.owners/*.lock"]
    names += ["session.json", "write_report.invocations", "tool-ledger.jsonl"]
    names += ["logs/supervisor.log", "logs/worker-1.log", "logs/worker-2.log"]
    for region in (r.lower() for r in REGIONS):
        names += [f"reports/q3-{region}.md", f"reports/q3-{region}.tmp", f"reports/.{region}.key"]
    return names


def prepare_demo_dir(folder: Path) -> Path:
    """Make ``folder`` ready for a fresh demo run and return it; refuse one that is not the demo's."""
    here = Path.cwd().resolve()
    resolved = folder.resolve()
    if resolved == here or resolved in here.parents:
        raise ConfigurationError(
            f"--dir {folder} is the current directory or contains it; the demo never works there: "
            "pass a new folder, e.g. --dir .agent_sessions/demo"
        )
    if resolved.exists() and not resolved.is_dir():
        raise ConfigurationError(f"--dir {folder} is a file, not a folder: pass a new folder")
    if resolved.is_dir() and not (resolved / MARKER).is_file() and any(resolved.iterdir()):
        raise ConfigurationError(
            f"--dir {folder} already holds files that 'harnessx demo' did not create, and the demo "
            "deletes nothing it did not write: pass a new or empty folder"
        )
    resolved.mkdir(parents=True, exist_ok=True)
    marker = resolved / MARKER
    if marker.is_file():
        _clear_previous_run(resolved)
    else:
        marker.write_text(_MARKER_TEXT, encoding="utf-8")
    return folder


def _clear_previous_run(folder: Path) -> None:
    for pattern in _demo_files():
        for path in folder.glob(pattern):
            if path.is_file() or path.is_symlink():
                path.unlink()
    for name in _DEMO_FOLDERS:
        with contextlib.suppress(OSError):  # missing, or kept because it holds a user's file
            (folder / name).rmdir()
