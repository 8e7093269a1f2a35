"""The incident bundle format: writing one, and reading an untrusted one.

A bundle is a ZIP archive holding ``manifest.json``, ``records.jsonl`` and, optionally,
``artifacts/<sha256>`` (see docs/flight-recorder.md). It is the format harnessx 0.9.1 writes
(``harness-x.incident`` version 1), so bundles go both ways between the two.

Reading never trusts the archive: member names, counts and sizes are checked against the
limits before anything is read, every member's size and SHA-256 against the manifest, and
every record's shape, order and identity; nothing is extracted or executed. A bundle that
fails is *invalid* (``IncidentError``). A valid bundle may still be *incomplete*: the
``issues`` say what the recording cannot explain.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import stat
import tempfile
import zipfile
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from harnessx._errors import HarnessError
from harnessx._journal import RECORD_KINDS, RECORD_VERSION
from harnessx._results import FINISHED_STATUSES, RunStatus

__all__ = [
    "FORMAT",
    "STATUSES",
    "VERSION",
    "Bundle",
    "IncidentError",
    "Limits",
    "artifact_refs",
    "canonical_json",
    "digest",
    "read_bundle",
    "write_bundle",
]

FORMAT = "harness-x.incident"
VERSION = 1
STATUSES = tuple(status.value for status in RunStatus)
_CAPTURES = ("present", "redacted", "omitted")
_ARTIFACT_REF = re.compile(r"artifact://([a-f0-9]{64})(?![a-f0-9])")
_ARTIFACT_MEMBER = re.compile(r"artifacts/[a-f0-9]{64}")
_MANIFEST, _RECORDS = "manifest.json", "records.jsonl"


class IncidentError(HarnessError, ValueError):
    """An incident bundle that is malformed, over a limit, of an unknown format, or altered."""


@dataclass(frozen=True)
class Limits:
    """What a bundle may hold (``BundleLimits`` is the public face of this)."""

    max_bytes: int
    max_member_bytes: int
    max_records: int
    max_members: int


@dataclass(frozen=True)
class Bundle:
    """A bundle's content once read and checked."""

    manifest: dict[str, Any]
    records: tuple[dict[str, Any], ...]
    artifacts: dict[str, bytes]
    issues: tuple[str, ...]


def canonical_json(value: Any) -> bytes:
    """The one JSON encoding of a bundle: UTF-8, sorted keys, compact, no NaN."""
    return json.dumps(
        value, ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
    ).encode()


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def artifact_refs(value: Any) -> set[str]:
    """The artifact digests ``value`` refers to (``artifact://<sha256>``)."""
    return set(_ARTIFACT_REF.findall(canonical_json(value).decode()))


def _parse(data: bytes | str, what: str) -> Any:
    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in pairs:
            if key in result:
                raise IncidentError(f"{what} repeats the key {key!r}")
            result[key] = value
        return result

    def not_finite(constant: str) -> Any:
        raise IncidentError(f"{what} holds {constant}, which JSON does not allow")

    try:
        return json.loads(data, object_pairs_hook=unique, parse_constant=not_finite)
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, IncidentError):
            raise
        raise IncidentError(f"{what} is not valid JSON ({exc})") from None


def _require(condition: bool, problem: str) -> None:
    if not condition:
        raise IncidentError(problem)


# ------------------------------------------------------------------- writing


def write_bundle(destination: Path, members: Mapping[str, bytes], limits: Limits) -> Path:
    """Write ``members`` as a bundle at ``destination``, which must not exist. The archive is
    checked by the reader before it is published, then published at once (a hard link to a
    synced temporary file): never half-written, never over another file."""
    _require(
        len(members) <= limits.max_members,
        f"the incident has more members than the limit ({limits.max_members})",
    )
    for name, data in members.items():
        _require(
            len(data) <= limits.max_member_bytes,
            f"{name} ({len(data)} bytes) exceeds the member byte limit ({limits.max_member_bytes})",
        )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, data in members.items():
            archive.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
    content = buffer.getvalue()
    _require(
        len(content) <= limits.max_bytes,
        f"the incident ({len(content)} bytes) exceeds the byte limit ({limits.max_bytes})",
    )
    read_bundle(io.BytesIO(content), limits)  # what we publish must read back
    destination.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(
        dir=destination.parent, prefix=f".{destination.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(content)
            stream.flush()
            os.fsync(stream.fileno())
        os.link(temporary, destination)  # FileExistsError if something is there already
    finally:
        os.unlink(temporary)
    directory = os.open(destination.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return destination


# ------------------------------------------------------------------- reading


def read_bundle(source: str | os.PathLike[str] | BinaryIO, limits: Limits) -> Bundle:
    """Read and check a bundle (see the module docstring); ``IncidentError`` if invalid."""
    try:
        if isinstance(source, str | os.PathLike):
            size = Path(source).stat().st_size
            _require(
                size <= limits.max_bytes,
                f"the bundle ({size} bytes) exceeds the byte limit ({limits.max_bytes})",
            )
        with zipfile.ZipFile(source) as archive:
            content = _members(archive, limits)
        manifest = _manifest(content)
        records = _records(content[_RECORDS], manifest, limits)
        artifacts = _artifacts(manifest, records, content)
        return Bundle(manifest, records, artifacts, tuple(_issues(manifest, records)))
    except IncidentError:
        raise
    except FileNotFoundError:
        raise IncidentError(f"no incident bundle at {source}") from None
    except (OSError, zipfile.BadZipFile, zlib.error, EOFError, RuntimeError, ValueError, KeyError) as exc:
        # zipfile raises many things for a damaged archive; none of them may escape raw.
        raise IncidentError(f"not a readable incident bundle ({type(exc).__name__}: {exc})") from None


def _members(archive: zipfile.ZipFile, limits: Limits) -> dict[str, bytes]:
    infos = archive.infolist()
    _require(
        len(infos) <= limits.max_members, f"the bundle has more members than the limit ({limits.max_members})"
    )
    names = [info.filename for info in infos]
    _require(len(set(names)) == len(names), "the bundle holds a member twice")
    _require(
        sum(info.file_size for info in infos) <= limits.max_bytes,
        f"the bundle expands beyond the byte limit ({limits.max_bytes})",
    )
    for info in infos:
        name = info.filename
        _require(
            name in (_MANIFEST, _RECORDS) or _ARTIFACT_MEMBER.fullmatch(name) is not None,
            f"the bundle holds an unexpected member {name!r}",
        )
        _require(info.file_size <= limits.max_member_bytes, f"{name} exceeds the member byte limit")
        _require(not info.flag_bits & 0x1, f"{name} is encrypted")
        _require(not stat.S_ISLNK(info.external_attr >> 16), f"{name} is a symbolic link")
        _require(
            info.compress_type in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED),
            f"{name} uses an unknown compression",
        )
    _require({_MANIFEST, _RECORDS} <= set(names), "the bundle lacks manifest.json or records.jsonl")
    return {info.filename: archive.read(info) for info in infos}


def _manifest(content: dict[str, bytes]) -> dict[str, Any]:
    manifest = _parse(content[_MANIFEST], _MANIFEST)
    _require(isinstance(manifest, dict), "manifest.json is not an object")
    _require(
        manifest.get("format") == FORMAT
        and type(manifest.get("version")) is int
        and manifest["version"] == VERSION,
        f"not a {FORMAT} version {VERSION} bundle (format {manifest.get('format')!r}, "
        f"version {manifest.get('version')!r}): read it with the harnessx that wrote it",
    )
    for key in ("run_id", "session_id", "status", "phase"):
        _require(
            isinstance(manifest.get(key), str) and bool(manifest[key]), f"the manifest's {key} is missing"
        )
    _require(manifest["status"] in STATUSES, f"the manifest's status {manifest['status']!r} is unknown")
    index = manifest.get("members")
    _require(
        isinstance(index, dict) and set(index) == set(content) - {_MANIFEST},
        "the manifest's member list does not match the bundle's members",
    )
    for name, descriptor in index.items():
        data = content[name]
        _require(isinstance(descriptor, dict), f"the manifest's entry for {name} is not an object")
        _require(
            type(descriptor.get("size")) is int and descriptor["size"] == len(data),
            f"{name} has the wrong size",
        )
        _require(descriptor.get("sha256") == digest(data), f"{name} does not match its checksum")
    unresolved = manifest.get("unresolved_operations")
    _require(isinstance(unresolved, list), "the manifest's unresolved_operations is not a list")
    for operation in unresolved:
        _require(
            isinstance(operation, dict)
            and isinstance(operation.get("execution_key"), str)
            and operation.get("status") in ("started", "uncertain")
            and type(operation.get("attempt")) is int,
            "the manifest lists a malformed unresolved operation",
        )
    checked: dict[str, Any] = manifest
    return checked


def _records(data: bytes, manifest: dict[str, Any], limits: Limits) -> tuple[dict[str, Any], ...]:
    lines = data.splitlines()
    _require(
        len(lines) <= limits.max_records, f"the bundle has more records than the limit ({limits.max_records})"
    )
    records = tuple(_parse(line, f"record {number}") for number, line in enumerate(lines, 1))
    for key in ("record_count", "last_sequence"):
        _require(
            type(manifest.get(key)) is int and manifest[key] == len(records),
            f"the manifest's {key} does not match the {len(records)} records",
        )
    ids: set[str] = set()
    for seq, record in enumerate(records, 1):
        _check_record(record, seq, manifest, ids)
    return records


def _check_record(record: Any, seq: int, manifest: dict[str, Any], ids: set[str]) -> None:
    where = f"record {seq}"
    _require(isinstance(record, dict), f"{where} is not an object")
    _require(
        type(record.get("version")) is int and record["version"] == RECORD_VERSION,
        f"{where} has an unknown version",
    )
    _require(
        type(record.get("seq")) is int and record["seq"] == seq,
        f"{where} is out of sequence (records were reordered or removed)",
    )
    record_id = record.get("id")
    _require(
        isinstance(record_id, str) and bool(record_id) and record_id not in ids,
        f"{where} has a missing or repeated id",
    )
    ids.add(record_id)
    _require(
        record.get("run_id") == manifest["run_id"] and record.get("session_id") == manifest["session_id"],
        f"{where} belongs to another run or session",
    )
    kind = record.get("kind")
    _require(isinstance(kind, str) and kind in RECORD_KINDS, f"{where} has an unknown kind {kind!r}")
    capture = record.get("capture")
    _require(capture in _CAPTURES, f"{where} has an unknown capture {capture!r}")
    _require(
        "payload" in record and (capture != "omitted" or record["payload"] is None),
        f"{where} has a payload it says was omitted",
    )
    payload = record["payload"]
    if capture == "present":
        _require(isinstance(payload, dict), f"{where}'s payload is not an object")
    for key in ("step_id", "attempt_id", "recorded_at"):
        _require(isinstance(record.get(key), str), f"{where} lacks {key}")
    key = record.get("execution_key")
    _require(key is None or isinstance(key, str), f"{where} has a malformed execution key")
    if kind.startswith("tool."):
        _require(bool(key), f"{where} is a tool record without an execution key")
    if capture == "present" and kind == "event":
        _require(
            isinstance(payload.get("type"), str)
            and payload.get("run_id") == manifest["run_id"]
            and payload.get("session_id") == manifest["session_id"],
            f"{where} is an event of another run or session",
        )


def _artifacts(
    manifest: dict[str, Any], records: tuple[dict[str, Any], ...], content: dict[str, bytes]
) -> dict[str, bytes]:
    catalog = manifest.get("artifacts")
    if not isinstance(catalog, dict) or set(catalog) != artifact_refs(list(records)):
        raise IncidentError(
            "the manifest's artifact catalogue does not match the records' artifact references"
        )
    artifacts: dict[str, bytes] = {}
    for key, descriptor in catalog.items():
        member = f"artifacts/{key}"
        _require(isinstance(descriptor, dict), f"the catalogue entry of artifact {key} is not an object")
        if descriptor.get("status") == "included":
            _require(descriptor.get("path") == member and member in content, f"artifact {key} is missing")
            _require(digest(content[member]) == key, f"artifact {key} does not match its checksum")
            artifacts[key] = content[member]
        else:
            _require(
                descriptor.get("status") in ("missing", "corrupt", "omitted"),
                f"artifact {key} has an unknown status",
            )
            _require(member not in content, f"artifact {key} is in the bundle although it says it is not")
    _require(
        set(content) == {_MANIFEST, _RECORDS, *(f"artifacts/{key}" for key in artifacts)},
        "the bundle holds an artifact no record refers to",
    )
    return artifacts


# --------------------------------------------------------------- completeness


def _issues(manifest: dict[str, Any], records: tuple[dict[str, Any], ...]) -> list[str]:
    """What the recording cannot explain (empty: complete). A last checkpoint that
    contradicts the manifest makes the bundle invalid instead."""
    issues: list[str] = []
    if not records or records[0]["kind"] != "run.started":
        issues.append("initial_run_record_missing")
    if any(record["capture"] != "present" for record in records):
        issues.append("payloads_omitted_or_redacted")
    if any(entry.get("status") != "included" for entry in manifest["artifacts"].values()):
        issues.append("artifacts_unavailable")
    if manifest["status"] not in FINISHED_STATUSES:
        issues.append("run_not_terminal_at_export")
    if manifest["unresolved_operations"]:
        issues.append("unresolved_tool_outcome")
    boundaries = _Boundaries()
    for record in records:
        boundaries.see(record)
    if not boundaries.checkpoint_seen:
        issues.append("checkpoint_missing")
    issues.extend(sorted(boundaries.gaps))
    if boundaries.open_models:
        issues.append("model_attempt_incomplete")
    if boundaries.open_tools:
        issues.append("tool_attempt_outcome_unresolved")
    if boundaries.last_checkpoint is not None:
        _check_final_state(manifest, boundaries.last_checkpoint)
    if _diverging(manifest, records):
        issues.append("records_diverge")
    return issues


class _Boundaries:
    """Pairs each model attempt's and tool attempt's records, in journal order."""

    def __init__(self) -> None:
        self.open_models: set[tuple[str, str]] = set()
        self.open_tools: set[tuple[str, str]] = set()
        self.models: dict[tuple[str, str], set[str]] = {}
        self.tools: dict[tuple[str, str], set[str]] = {}
        self.gaps: set[str] = set()
        self.checkpoint_seen = False
        self.last_checkpoint: dict[str, Any] | None = None

    def see(self, record: dict[str, Any]) -> None:
        kind, payload = record["kind"], record["payload"]
        if kind == "checkpoint":
            self.checkpoint_seen = True
            # A checkpoint withheld from the export must not be replaced by an older one.
            self.last_checkpoint = payload if record["capture"] == "present" else None
        elif kind.startswith("model."):
            self._model(kind[6:], (record["step_id"], record["attempt_id"]))
        elif kind.startswith("tool."):
            tool = (record["execution_key"], record["attempt_id"])
            resolved = (
                kind == "tool.resolved"
                and record["capture"] == "present"
                and payload.get("result") is not None
            )
            self._tool(kind[5:], tool, resolved)

    def _model(self, boundary: str, key: tuple[str, str]) -> None:
        seen = self.models.setdefault(key, set())
        if boundary == "started":
            self.open_models.add(key)
            self.models[key] = {"started"}
        elif boundary in ("response", "processed"):
            if ("started" if boundary == "response" else "response") not in seen:
                self.gaps.add("model_boundaries_missing")
            seen.add(boundary)
        elif boundary in ("completed", "failed"):
            if boundary == "completed" and seen != {"started", "response", "processed"}:
                self.gaps.add("model_boundaries_missing")
            self.open_models.discard(key)

    def _tool(self, boundary: str, key: tuple[str, str], resolved: bool) -> None:
        seen = self.tools.setdefault(key, set())
        if boundary == "started":
            self.tools[key] = {"started"}
        elif boundary == "dispatched":
            if "started" not in seen:
                self.gaps.add("tool_boundaries_missing")
            self.open_tools.add(key)
        elif boundary == "returned":
            if "started" not in seen:
                self.gaps.add("tool_boundaries_missing")
            seen.add("returned")
            self.open_tools.discard(key)
        elif boundary == "processed":
            if not {"returned", "resolved"} & seen:
                self.gaps.add("tool_boundaries_missing")
        elif resolved:
            seen.add("resolved")
            self.open_tools.discard(key)


def _check_final_state(manifest: dict[str, Any], checkpoint: Any) -> None:
    _require(isinstance(checkpoint, dict), "the last checkpoint record is not an object")
    _require(
        checkpoint.get("status") == manifest["status"] and checkpoint.get("phase") == manifest["phase"],
        "the manifest's status and phase differ from the last recorded checkpoint",
    )
    tools = checkpoint.get("tools", [])
    _require(
        isinstance(tools, list) and all(isinstance(t, dict) for t in tools),
        "the last checkpoint's tools are malformed",
    )
    expected = [
        {key: tool.get(key) for key in ("execution_key", "status", "attempt")}
        for tool in tools
        if tool.get("status") in ("started", "uncertain")
    ]
    _require(
        expected == manifest["unresolved_operations"],
        "the manifest's unresolved operations differ from the last recorded checkpoint",
    )


def _diverging(manifest: dict[str, Any], records: Iterable[dict[str, Any]]) -> bool:
    """Whether recorded payloads contradict each other: a tool call started that the model
    reply before it did not ask for, event cursors that do not increase, or a final
    ``run_result`` whose status is not the run's (only payloads present are compared)."""
    asked: list[tuple[Any, Any]] | None = None
    cursor = 0
    final: str | None = None
    for record in records:
        if record["capture"] != "present":
            continue
        kind, payload = record["kind"], record["payload"]
        if kind == "model.completed":
            calls = payload.get("tool_calls") or []
            asked = [(c.get("name"), c.get("input")) for c in calls if isinstance(c, dict)]
        elif kind == "tool.started" and asked is not None:
            call = payload.get("call")
            if not isinstance(call, dict) or (call.get("name"), call.get("input")) not in asked:
                return True
        elif kind == "event":
            number = payload.get("cursor")
            if isinstance(number, str) and number.isdigit():
                if int(number) <= cursor:
                    return True
                cursor = int(number)
            if payload.get("type") == "run_result" and isinstance(payload.get("data"), dict):
                final = payload["data"].get("status")
    return manifest["status"] in FINISHED_STATUSES and final is not None and final != manifest["status"]
