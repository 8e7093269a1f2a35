"""The flight recorder's public face: exporting a recorded run, and reading bundles offline.

``export_incident`` reads one recorded run from a store (one consistent snapshot) and writes
it as an incident bundle, payloads omitted unless the ``ExportPolicy`` includes them, and
then redacted. ``IncidentRecorder`` verifies and plays bundles back without a model, tools,
credentials, a runtime or a database: a ``Playback`` is the bundle's records, checked.
"""

from __future__ import annotations

import asyncio
import copy
import os
import platform
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from harnessx._bundle import FORMAT, VERSION, IncidentError, Limits, artifact_refs, canonical_json, digest
from harnessx._bundle import read_bundle as _read_bundle
from harnessx._bundle import write_bundle as _write_bundle
from harnessx._errors import ConfigurationError
from harnessx._events import RunEvent, RunEventType
from harnessx._redaction import Redactor, environment_secrets
from harnessx._registry import AgentRef
from harnessx._results import RunResult
from harnessx.providers._base import ToolCall
from harnessx.store._legacy import NEEDS_CALL, upgrade_event
from harnessx.store._protocol import IncidentSnapshot, Store

__all__ = [
    "BundleLimits",
    "ExportPolicy",
    "IncidentError",
    "IncidentRecorder",
    "Playback",
    "VerificationReport",
    "export_incident",
]

Redact = Callable[[str, Any], Any]


@dataclass(frozen=True)
class BundleLimits:
    """How large a bundle may be, exported or read: total and per-member bytes, records and
    members. Positive integers."""

    max_bytes: int = 64 * 1024 * 1024
    max_member_bytes: int = 32 * 1024 * 1024
    max_records: int = 100_000
    max_members: int = 10_000

    def __post_init__(self) -> None:
        for name in ("max_bytes", "max_member_bytes", "max_records", "max_members"):
            value = getattr(self, name)
            if type(value) is not int or value <= 0:
                raise ConfigurationError(f"BundleLimits.{name} must be a positive integer, got {value!r}")

    def _limits(self) -> Limits:
        return Limits(self.max_bytes, self.max_member_bytes, self.max_records, self.max_members)


@dataclass(frozen=True)
class ExportPolicy:
    """What an export discloses. By default only the journal's shape (kinds, ids, sequence,
    steps, attempts, times): payloads are opt-in, and artifacts need payloads too.

    Included payloads are redacted (credentials; see docs/flight-recorder.md). ``redact``,
    if given, is called as ``redact(kind, payload)`` with a copy of each redacted payload and
    returns the payload to export, or ``None`` to omit it; its result is redacted again.
    """

    include_payloads: bool = False
    include_artifacts: bool = False
    redact: Redact | None = None

    def __post_init__(self) -> None:
        if type(self.include_payloads) is not bool or type(self.include_artifacts) is not bool:
            raise ConfigurationError(
                "ExportPolicy's include_payloads and include_artifacts must be True or False"
            )
        if self.include_artifacts and not self.include_payloads:
            raise ConfigurationError(
                "ExportPolicy(include_artifacts=True) also needs include_payloads=True: artifacts are "
                "referred to from payloads"
            )
        if self.redact is not None and not callable(self.redact):
            raise ConfigurationError("ExportPolicy.redact must be a function of (kind, payload)")


@dataclass(frozen=True)
class VerificationReport:
    """``valid``: the bundle is what an exporter wrote (nothing altered, added or removed).
    ``complete``: also, the recording explains the whole run; otherwise ``issues`` says what
    is missing. For an invalid bundle, ``issues`` holds the reason."""

    valid: bool
    complete: bool
    record_count: int = 0
    issues: tuple[str, ...] = ()


@dataclass(frozen=True)
class Playback:
    """A verified bundle: its manifest, its records in order, the report, and the bytes of
    its included artifacts by SHA-256. Reading it calls nothing."""

    manifest: dict[str, Any]
    records: tuple[dict[str, Any], ...]
    report: VerificationReport
    artifacts: dict[str, bytes] = field(default_factory=dict, repr=False)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        """The records of one kind (``"model.response"``, ``"tool.returned"``, ...), in order."""
        return [record for record in self.records if record["kind"] == kind]

    def events(self) -> list[RunEvent]:
        """The run's events as exported (those whose payload the export included, secrets
        redacted)."""
        decoded = []
        for record in self.of_kind("event"):
            if record["capture"] != "omitted" and isinstance(record["payload"], dict):
                try:
                    event = _event(record["payload"])
                    if event is not None:
                        decoded.append(event)
                except (KeyError, ValueError, TypeError) as exc:
                    raise IncidentError(
                        f"record {record['seq']} holds an event this harnessx cannot read: {exc}"
                    ) from None
        return decoded

    @property
    def result(self) -> RunResult | None:
        """The run's last recorded ``RunResult`` (``None`` if no ``run_result`` event is present)."""
        results = [event for event in self.events() if event.type is RunEventType.RUN_RESULT]
        return results[-1].data if results else None


def _event(payload: dict[str, Any]) -> RunEvent | None:
    """A recorded event; one recorded before payloads were typed is read in today's form
    (``None`` for one that has no counterpart any more)."""
    kind = RunEventType(payload["type"])
    upgraded = upgrade_event(
        kind, payload.get("data"), str(payload.get("step_id", "")), str(payload.get("attempt_id", ""))
    )
    if upgraded is None:
        return None
    data, step_id, attempt_id = upgraded
    event = RunEvent.from_dict({**payload, "data": data, "step_id": step_id, "attempt_id": attempt_id})
    if isinstance(event.data, ToolCall):
        event.data.input.pop(NEEDS_CALL, None)  # the input was not recorded then
    return event


class IncidentRecorder:
    """Verifies and plays back incident bundles. Needs no provider, tool, credential,
    runtime or database, and never executes or extracts anything from a bundle."""

    def __init__(self, *, limits: BundleLimits | None = None) -> None:
        if limits is not None and not isinstance(limits, BundleLimits):
            raise ConfigurationError("IncidentRecorder(limits=...) takes a BundleLimits")
        self.limits = limits or BundleLimits()

    async def verify(self, bundle: str | os.PathLike[str]) -> VerificationReport:
        """Check ``bundle``; never raises for a bad bundle (``valid=False`` says why)."""
        try:
            return (await self.playback(bundle)).report
        except IncidentError as exc:
            return VerificationReport(False, False, 0, (str(exc),))

    async def playback(self, bundle: str | os.PathLike[str]) -> Playback:
        """The bundle's content, checked; ``IncidentError`` if it is not a valid bundle."""
        read = await asyncio.to_thread(_read_bundle, bundle, self.limits._limits())
        report = VerificationReport(True, not read.issues, len(read.records), read.issues)
        return Playback(read.manifest, read.records, report, read.artifacts)


async def export_incident(
    backend: Store,
    session_id: str,
    run_id: str,
    destination: str | os.PathLike[str],
    *,
    policy: ExportPolicy | None = None,
    limits: BundleLimits | None = None,
) -> Path:
    """Write recorded run ``run_id`` of ``session_id`` as an incident bundle at
    ``destination`` (which must not exist) and return its path. Needs an initialised backend,
    no agent. Reads are scoped to ``session_id``: knowing a run id grants nothing else; the
    application decides who may export which session."""
    policy = ExportPolicy() if policy is None else policy
    limits = BundleLimits() if limits is None else limits
    if not isinstance(policy, ExportPolicy) or not isinstance(limits, BundleLimits):
        raise ConfigurationError(
            "export_incident takes policy=ExportPolicy(...) and limits=BundleLimits(...)"
        )
    path = Path(destination)
    if await asyncio.to_thread(path.exists):
        raise FileExistsError(
            f"{path} already exists: incident bundles are never overwritten, choose another path"
        )
    snapshot = await backend.incident_snapshot(session_id, run_id, max_records=limits.max_records)
    records = _disclosed(snapshot, policy, Redactor(_secrets(backend)))
    members = {"records.jsonl": b"".join(canonical_json(record) + b"\n" for record in records)}
    catalog: dict[str, dict[str, str]] = {}
    for key in sorted(artifact_refs(records)):
        # This store keeps no artifacts; references come from bundles of stores that did.
        reason = "artifact_unavailable" if policy.include_artifacts else "export_policy"
        catalog[key] = {"status": "missing" if policy.include_artifacts else "omitted", "reason": reason}
    manifest = _manifest(snapshot, records, catalog, members)
    members["manifest.json"] = canonical_json(manifest)
    return await asyncio.to_thread(_write_bundle, path, members, limits._limits())


def _disclosed(snapshot: IncidentSnapshot, policy: ExportPolicy, redactor: Redactor) -> list[dict[str, Any]]:
    """The journal as the policy lets it out: each record with its capture status."""
    records = []
    for original in snapshot.records:
        record = dict(original)
        payload, capture = None, "omitted"
        if policy.include_payloads:
            payload = redactor.redact(original["payload"])
            if policy.redact is not None:
                payload = policy.redact(record["kind"], copy.deepcopy(payload))
                # A redactor may not put credentials back either.
                payload = redactor.redact(payload)
            if payload is not None:
                capture = "present" if payload == original["payload"] else "redacted"
        record.update(payload=payload, capture=capture)
        records.append(record)
    return records


def _manifest(
    snapshot: IncidentSnapshot,
    records: list[dict[str, Any]],
    catalog: dict[str, dict[str, str]],
    members: dict[str, bytes],
) -> dict[str, Any]:
    state, session = snapshot.state, snapshot.session
    ref = AgentRef.parse(session.agent_ref) if session.agent_ref else None
    unresolved = [
        {"execution_key": entry.execution_key, "status": entry.status.value, "attempt": entry.attempt}
        for entry in state.entries()
        if entry.status.value in ("started", "uncertain")
    ]
    return {
        "format": FORMAT,
        "version": VERSION,
        "created_at": datetime.now(UTC).isoformat(),
        "run_id": state.run_id,
        "session_id": state.session_id,
        "status": state.status.value,
        "phase": state.phase.value,
        "agent": {"name": ref.name, "version": ref.version} if ref is not None else None,
        "sdk_version": _version(),
        "python_version": platform.python_version(),
        "record_count": len(records),
        "last_sequence": records[-1]["seq"] if records else 0,
        "unresolved_operations": unresolved,
        "artifacts": catalog,
        "members": {name: {"sha256": digest(data), "size": len(data)} for name, data in members.items()},
    }


def _secrets(backend: Store) -> set[str]:
    """Literal secrets to take out of payloads: the environment's, and the store's DSN password."""
    found = environment_secrets()
    dsn = getattr(backend, "_dsn", None)  # PostgresBackend keeps its DSN's secrets there
    found.update(getattr(dsn, "secrets", ()))
    return found


def _version() -> str:
    try:
        return metadata.version("harnessx-durable")
    except metadata.PackageNotFoundError:
        return "unknown"
