"""Conversation snapshots on disk: ``SessionState`` and ``PersistentMemory``.

A snapshot is ``<storage_dir>/<session_id>.json``, written atomically (a temporary file in
the same folder, fsynced, then renamed over the old one). The format is the original
harnessx's version 2 (``asdict(SessionState)``), so each package reads the other's files,
plus one key of ours the original ignores: ``results``, the whole text of tool results the
conversation holds as previews. Version 1 files load too: the original's, and this
project's 0.1 ones (``{"version": 1, "session_id", "config", "messages", "extensions"}``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harnessx._config import RuntimeState
from harnessx._errors import ConfigurationError
from harnessx._ids import uuid7
from harnessx.providers._base import TokenUsage

__all__ = ["SNAPSHOT_VERSION", "CheckpointData", "PersistentMemory", "RuntimeStatus", "SessionState"]

SNAPSHOT_VERSION = 2
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")


@dataclass
class SessionState:
    """What a conversation snapshot holds."""

    session_id: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    total_usage: TokenUsage = field(default_factory=TokenUsage)
    created_at: str = ""
    updated_at: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    extensions: dict[str, Any] = field(default_factory=dict)
    lifetime_iterations: int = 0
    estimated_cost: float | None = None
    provider_state: dict[str, Any] = field(default_factory=dict)
    version: int = SNAPSHOT_VERSION
    results: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["total_usage"] = self.total_usage.to_dict()
        return data


@dataclass
class CheckpointData:
    """A snapshot with the configuration it was taken under (the original's type)."""

    session_state: SessionState
    agent_config_dict: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    timestamp: str = ""
    iteration_count: int = 0


@dataclass
class RuntimeStatus:
    """A runtime's status as the original's type describes it."""

    session_id: str
    state: RuntimeState = RuntimeState.INITIALIZING
    started_at: str = ""
    uptime_seconds: float = 0.0
    iterations_completed: int = 0
    total_usage: TokenUsage = field(default_factory=TokenUsage)
    checkpoints: list[str] = field(default_factory=list)


class PersistentMemory:
    """Snapshots of sessions as JSON files in ``storage_dir``."""

    def __init__(self, storage_dir: str | os.PathLike[str] = ".agent_sessions") -> None:
        self.storage_dir = str(storage_dir)

    def _file(self, session_id: str) -> Path:
        if not isinstance(session_id, str) or _SESSION_ID.fullmatch(session_id) is None:
            raise ConfigurationError(
                f"invalid session id {session_id!r}: use 1 to 128 letters, digits, '_' or '-'"
            )
        return Path(self.storage_dir) / f"{session_id}.json"

    def save_session(self, state: SessionState) -> Path:
        now = datetime.now(UTC).isoformat()
        state.updated_at = now
        state.created_at = state.created_at or now
        state.session_id = state.session_id or uuid7()
        path = self._file(state.session_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(state.to_dict(), indent=2, allow_nan=False)
        handle = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed explicitly before the rename
            "w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.", delete=False
        )
        try:
            with handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(handle.name, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(handle.name)
        return path

    def load_session(self, session_id: str) -> SessionState:
        path = self._file(session_id)
        if not path.exists():
            raise ConfigurationError(
                f"no saved session {session_id!r} in {Path(self.storage_dir).resolve()}: check the id and "
                "the storage_dir it was saved to"
            )
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                raise ValueError("the file does not hold a JSON object")
        except (OSError, ValueError) as exc:
            raise ConfigurationError(
                f"session file {path} is not a readable snapshot ({exc}); restore it from a backup or start "
                "a new session"
            ) from exc
        version = data.get("version", 1)
        if version not in (1, 2):
            raise ConfigurationError(
                f"session file {path} has snapshot version {version!r}; this harnessx reads versions "
                "1 and 2: upgrade harnessx to load it"
            )
        if data.get("session_id") != session_id:
            raise ConfigurationError(
                f"session file {path} holds session {data.get('session_id')!r}, not {session_id!r}; it was "
                "renamed or copied: restore the original name"
            )
        extensions = data.get("extensions")
        if extensions is None:
            extensions = (data.get("metadata") or {}).get("extensions", {})
        try:
            return SessionState(
                session_id=session_id,
                messages=list(data.get("messages") or []),
                total_usage=TokenUsage.from_dict(data.get("total_usage")),
                created_at=str(data.get("created_at", "")),
                updated_at=str(data.get("updated_at", "")),
                metadata=dict(data.get("metadata") or {}),
                config=dict(data.get("config") or {}),
                extensions=dict(extensions or {}),
                lifetime_iterations=int(data.get("lifetime_iterations", 0)),
                estimated_cost=data.get("estimated_cost"),
                provider_state=dict(data.get("provider_state") or {}),
                version=int(version),
                results={str(k): str(v) for k, v in (data.get("results") or {}).items()},
            )
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(
                f"session file {path} is not a readable snapshot ({exc}); restore it from a backup or start "
                "a new session"
            ) from exc

    def list_sessions(self) -> list[dict[str, Any]]:
        """Saved sessions, most recently updated first."""
        found: list[dict[str, Any]] = []
        folder = Path(self.storage_dir)
        if not folder.is_dir():
            return found
        for path in folder.glob("*.json"):
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(data, dict):
                found.append(
                    {
                        "session_id": data.get("session_id", path.stem),
                        "created_at": data.get("created_at", ""),
                        "updated_at": data.get("updated_at", ""),
                        "message_count": len(data.get("messages") or []),
                    }
                )
        return sorted(found, key=lambda s: str(s.get("updated_at", "")), reverse=True)

    def delete_session(self, session_id: str) -> None:
        """Delete a snapshot (and the original harnessx's artifacts folder for it)."""
        path = self._file(session_id)
        path.unlink(missing_ok=True)
        shutil.rmtree(Path(self.storage_dir) / "artifacts" / session_id, ignore_errors=True)
