"""Incident bundles from real recorded runs on each backend: export, redaction, offline
playback (with every live dependency booby-trapped), and verification of altered bundles."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import socket
import sqlite3
import zipfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from durable_support import BackendTarget

from harnessx import (
    Agent,
    AgentRuntime,
    BundleLimits,
    ConfigurationError,
    ExportPolicy,
    IncidentError,
    IncidentRecorder,
    LLMProvider,
    PermissionLevel,
    Playback,
    ProviderResponse,
    RunStatus,
    StorageError,
    StreamChunk,
    Tool,
    ToolCall,
    export_incident,
)

SECRET_KEY = "sk-proj-A1b2C3d4E5f6G7h8I9j0K1l2"
DB_PASSWORD = "correct-horse-battery"
ENV_SECRET = "env-secret-value-0042"
BEARER = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJvcHMifQ.c2lnbmF0dXJlLXZhbHVl"


class InvoiceModel(LLMProvider):
    """Calls ``overdue_balance`` once, then answers with what the tool returned."""

    def __init__(self) -> None:
        self.calls = 0

    async def create(self, **kwargs: Any) -> ProviderResponse:
        self.calls += 1
        results = [
            block
            for m in kwargs["messages"]
            if isinstance(m.get("content"), list)
            for block in m["content"]
            if block.get("type") == "tool_result"
        ]
        if not results:
            return ProviderResponse(tool_calls=[ToolCall("inv", "overdue_balance", {"account": "demo"})])
        return ProviderResponse(text=f"Overdue balance: {json.loads(results[0]['content'])['balance']}.")

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


def invoice_agent(provider: LLMProvider, payload: dict[str, Any] | None = None) -> tuple[Agent, list[str]]:
    agent = Agent(provider=provider)
    calls: list[str] = []

    @agent.tools.register(permission=PermissionLevel.ALLOW, replay_policy="safe")
    def overdue_balance(account: str) -> str:
        """The unpaid balance of an account's overdue invoices."""
        calls.append(account)
        return json.dumps({"account": account, "balance": 1500, **(payload or {})})

    return agent, calls


async def recorded_run(
    target: BackendTarget, tmp_path: Path, payload: dict[str, Any] | None = None, **policy: Any
) -> tuple[Path, str, str, InvoiceModel, list[str]]:
    provider = InvoiceModel()
    agent, calls = invoice_agent(provider, payload)
    async with target.open() as backend, AgentRuntime(agent, backend=backend, recording=True) as runtime:
        result = await runtime.run("Analyze overdue invoices for the demo account")
        assert result.status is RunStatus.COMPLETED, result.error
        bundle = await runtime.export_incident(
            result.run_id, destination=tmp_path / "incident.hx", policy=ExportPolicy(**policy)
        )
        assert runtime.session_id is not None
        return bundle, runtime.session_id, result.run_id, provider, calls


def of_kind(playback: Playback, kind: str) -> list[dict[str, Any]]:
    return playback.of_kind(kind)


def booby_trap(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make every live dependency fail loudly: models, tools, agents, sockets, databases."""
    touched: list[str] = []

    def forbidden(name: str) -> Callable[..., Any]:
        def trap(*args: Any, **kwargs: Any) -> Any:
            touched.append(name)
            raise AssertionError(f"offline playback touched {name}")

        return trap

    monkeypatch.setattr(InvoiceModel, "create", forbidden("the model"))
    monkeypatch.setattr(Tool, "invoke", forbidden("a tool"))
    monkeypatch.setattr(Agent, "__init__", forbidden("an agent"))
    monkeypatch.setattr(AgentRuntime, "__init__", forbidden("a runtime"))
    monkeypatch.setattr(socket.socket, "connect", forbidden("the network"))
    monkeypatch.setattr(sqlite3, "connect", forbidden("SQLite"))
    monkeypatch.setattr(asyncpg, "connect", forbidden("PostgreSQL"))
    return touched


async def test_a_recorded_run_plays_back_offline_without_calling_anything(
    target: BackendTarget, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle, session_id, run_id, provider, calls = await recorded_run(target, tmp_path, include_payloads=True)
    assert (provider.calls, calls) == (2, ["demo"])
    touched = booby_trap(monkeypatch)
    playback = await IncidentRecorder().playback(bundle)
    assert touched == [] and (provider.calls, calls) == (2, ["demo"])
    assert playback.report.valid and playback.report.complete, playback.report.issues
    assert playback.report.record_count == len(playback.records)
    assert [r["seq"] for r in playback.records] == list(range(1, len(playback.records) + 1))
    manifest = playback.manifest
    assert (manifest["format"], manifest["version"]) == ("harness-x.incident", 1)
    assert manifest["sdk_version"] == metadata.version("harnessx-durable")
    assert (manifest["session_id"], manifest["run_id"], manifest["status"]) == (
        session_id,
        run_id,
        "completed",
    )
    assert (
        of_kind(playback, "run.started")[0]["payload"]["message"]
        == "Analyze overdue invoices for the demo account"
    )
    (returned,) = of_kind(playback, "tool.returned")
    assert json.loads(returned["payload"]["content"]) == {"account": "demo", "balance": 1500}
    replies = [r["payload"]["text"] for r in of_kind(playback, "model.processed")]
    assert replies == ["", "Overdue balance: 1500."]
    assert playback.result is not None and playback.result.output == "Overdue balance: 1500."
    assert [e.type.value for e in playback.events()][-1] == "run_result"


async def test_a_default_export_discloses_the_shape_of_the_run_only(
    target: BackendTarget, tmp_path: Path
) -> None:
    bundle, *_ = await recorded_run(target, tmp_path)
    with zipfile.ZipFile(bundle) as archive:
        content = b"".join(archive.read(name) for name in archive.namelist())
    # Not 1500 as a number: the bundle's ids and digests are hex, which holds "1500" by chance.
    assert b"overdue" not in content.lower() and not re.search(rb"(?<![0-9a-f])1500(?![0-9a-f])", content)
    playback = await IncidentRecorder().playback(bundle)
    assert all(r["payload"] is None and r["capture"] == "omitted" for r in playback.records)
    assert playback.report.valid and playback.report.issues == ("payloads_omitted_or_redacted",)
    kinds = [r["kind"] for r in playback.records]
    assert kinds[0] == "run.started" and kinds.count("model.started") == 2 and "tool.returned" in kinds


async def test_credentials_are_redacted_on_export_and_kept_in_the_store(
    target: BackendTarget, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BILLING_API_TOKEN", ENV_SECRET)
    secrets = {
        "api_key": SECRET_KEY,
        "database": f"postgresql://billing:{DB_PASSWORD}@db.internal:5432/billing",
        "headers": {"Authorization": f"Bearer {BEARER}", "Accept": "application/json"},
        "log": f"connected with host=db password={DB_PASSWORD} token seen: {ENV_SECRET}",
    }
    seen: list[tuple[str, Any]] = []

    def custom(kind: str, payload: Any) -> Any:
        seen.append((kind, payload))
        if kind == "run.started":
            payload["message"] = "removed by policy"
        return None if kind == "model.started" else payload

    bundle, session_id, run_id, *_ = await recorded_run(
        target, tmp_path, secrets, include_payloads=True, redact=custom
    )
    with zipfile.ZipFile(bundle) as archive:
        content = b"".join(archive.read(name) for name in archive.namelist())
    for secret in (SECRET_KEY, DB_PASSWORD, ENV_SECRET, BEARER):
        assert secret.encode() not in content, secret
    playback = await IncidentRecorder().playback(bundle)
    assert playback.report.valid and "payloads_omitted_or_redacted" in playback.report.issues
    (returned,) = of_kind(playback, "tool.returned")
    assert returned["capture"] == "redacted"
    exported = json.loads(returned["payload"]["content"])
    assert exported["api_key"] == "[REDACTED]" and exported["balance"] == 1500
    assert exported["database"] == "postgresql://billing:[REDACTED]@db.internal:5432/billing"
    assert exported["headers"] == {"Authorization": "[REDACTED]", "Accept": "application/json"}
    assert of_kind(playback, "run.started")[0]["payload"]["message"] == "removed by policy"
    assert all(r["payload"] is None and r["capture"] == "omitted" for r in of_kind(playback, "model.started"))
    # The redactor saw copies already redacted: nothing it returns can leak what it never got.
    assert seen and not any(SECRET_KEY in json.dumps(payload) for _, payload in seen)
    # The store still holds the run as it happened.
    async with target.open() as backend:
        snapshot = await backend.incident_snapshot(session_id, run_id)
    stored = next(r for r in snapshot.records if r["kind"] == "tool.returned")
    assert json.loads(stored["payload"]["content"])["api_key"] == SECRET_KEY
    assert snapshot.records[0]["payload"]["message"] == "Analyze overdue invoices for the demo account"


def rewrite(
    source: Path,
    destination: Path,
    *,
    records: Callable[[list[dict[str, Any]]], None] | None = None,
    manifest: Callable[[dict[str, Any]], None] | None = None,
    extra: dict[str, bytes] | None = None,
    rehash: bool = True,
    raw_manifest: Callable[[bytes], bytes] = lambda text: text,
    recount: bool = False,
) -> Path:
    """A copy of ``source`` altered as an attacker (or a careless editor) would."""
    with zipfile.ZipFile(source) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    index = json.loads(members["manifest.json"])
    if records is not None:
        lines = [json.loads(line) for line in members["records.jsonl"].splitlines()]
        records(lines)
        members["records.jsonl"] = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
        if recount:
            index.update(record_count=len(lines), last_sequence=len(lines))
    if rehash:
        for name, data in members.items():
            if name != "manifest.json":
                index["members"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    if manifest is not None:
        manifest(index)
    members["manifest.json"] = raw_manifest(json.dumps(index).encode())
    members.update(extra or {})
    with zipfile.ZipFile(destination, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return destination


def drop(kind: str) -> Callable[[list[dict[str, Any]]], None]:
    def change(records: list[dict[str, Any]]) -> None:
        records[:] = [r for r in records if r["kind"] != kind]
        for seq, record in enumerate(records, 1):
            record["seq"] = seq

    return change


def set_tool_input(records: list[dict[str, Any]]) -> None:
    for record in records:
        if record["kind"] == "tool.started":
            record["payload"]["call"]["input"] = {"account": "someone-else"}


INVALID = {
    "edited without a new checksum": dict(records=lambda r: r[0].update(step_id="9"), rehash=False),
    "records reordered": dict(records=lambda r: r.insert(0, r.pop(1))),
    "a record of another session": dict(records=lambda r: r[2].update(session_id="another")),
    "a status that was not recorded": dict(manifest=lambda m: m.update(status="failed")),
    "an unknown member": dict(extra={"../escape.py": b"raise SystemExit('must not run')"}),
    "an unknown format version": dict(manifest=lambda m: m.update(version=2)),
    "a repeated JSON key": dict(raw_manifest=lambda text: text[:-1] + b', "status": "failed"}'),
    "an artifact nothing refers to": dict(extra={"artifacts/" + "a" * 64: b"x"}),
}


@pytest.mark.parametrize("alteration", sorted(INVALID))
async def test_an_altered_bundle_is_invalid(target: BackendTarget, tmp_path: Path, alteration: str) -> None:
    bundle, *_ = await recorded_run(target, tmp_path, include_payloads=True)
    altered = rewrite(bundle, tmp_path / "altered.hx", **INVALID[alteration])  # type: ignore[arg-type]
    report = await IncidentRecorder().verify(altered)
    assert not report.valid and not report.complete and report.issues, report
    with pytest.raises(IncidentError):
        await IncidentRecorder().playback(altered)
    assert not (tmp_path.parent / "escape.py").exists()


async def test_an_altered_bundle_with_fresh_checksums_cannot_claim_a_complete_story(
    target: BackendTarget, tmp_path: Path
) -> None:
    bundle, *_ = await recorded_run(target, tmp_path, include_payloads=True)
    gap = rewrite(bundle, tmp_path / "gap.hx", records=drop("model.response"), recount=True)
    report = await IncidentRecorder().verify(gap)
    assert report.valid and not report.complete and "model_boundaries_missing" in report.issues
    untold = rewrite(bundle, tmp_path / "untold.hx", records=drop("tool.returned"), recount=True)
    report = await IncidentRecorder().verify(untold)
    assert report.valid and "tool_attempt_outcome_unresolved" in report.issues
    diverging = rewrite(bundle, tmp_path / "diverging.hx", records=set_tool_input)
    report = await IncidentRecorder().verify(diverging)
    assert report.valid and report.issues == ("records_diverge",)


async def test_a_truncated_or_foreign_file_is_an_invalid_bundle(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a bundle")
    for path in (tmp_path / "notes.txt", tmp_path / "missing.hx"):
        report = await IncidentRecorder().verify(path)
        assert not report.valid and report.issues
    with pytest.raises(IncidentError, match="no incident bundle"):
        await IncidentRecorder().playback(tmp_path / "missing.hx")


async def test_exports_are_bounded_never_overwrite_and_leave_nothing_behind(
    target: BackendTarget, tmp_path: Path
) -> None:
    bundle, session_id, run_id, *_ = await recorded_run(target, tmp_path)
    before = bundle.read_bytes()
    async with target.open() as backend:
        with pytest.raises(FileExistsError, match="never overwritten"):
            await export_incident(backend, session_id, run_id, bundle)
        assert bundle.read_bytes() == before
        small = tmp_path / "out" / "small.hx"
        small.parent.mkdir()
        with pytest.raises(IncidentError, match="limit"):
            await export_incident(
                backend, session_id, run_id, small, limits=BundleLimits(max_member_bytes=10)
            )
        assert not small.exists() and list(small.parent.iterdir()) == []
        with pytest.raises(StorageError, match="record limit"):
            await export_incident(backend, session_id, run_id, small, limits=BundleLimits(max_records=3))
    assert not (await IncidentRecorder(limits=BundleLimits(max_bytes=100)).verify(bundle)).valid
    assert not (await IncidentRecorder(limits=BundleLimits(max_records=3)).verify(bundle)).valid
    assert (await IncidentRecorder().verify(bundle)).valid


def test_policies_and_limits_refuse_bad_values() -> None:
    with pytest.raises(ValueError, match="include_payloads=True"):
        ExportPolicy(include_artifacts=True)
    with pytest.raises(ValueError, match="True or False"):
        ExportPolicy(include_payloads="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="positive integer"):
        BundleLimits(max_bytes=-1)
    with pytest.raises(ConfigurationError, match="positive integer"):
        BundleLimits(max_records=True)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="recording must be"):
        AgentRuntime(recording="yes")  # type: ignore[arg-type]

    class JournalLess:
        """A store of some other kind, keeping no journal."""

    with pytest.raises(ConfigurationError, match="needs a SQLite or PostgreSQL backend"):
        AgentRuntime(backend=JournalLess(), recording=True)  # type: ignore[arg-type]


async def test_a_live_run_exports_as_unfinished_and_a_cancelled_call_as_incomplete(
    target: BackendTarget, tmp_path: Path
) -> None:
    entered = asyncio.Event()

    class Streaming(InvoiceModel):
        async def stream(self, **kwargs: Any) -> Any:
            yield StreamChunk("text_delta", "partial ans")
            entered.set()
            await asyncio.Event().wait()

    agent, _ = invoice_agent(Streaming())
    async with target.open() as backend, AgentRuntime(agent, backend=backend, recording=True) as runtime:
        handle = await runtime.submit("Analyze")
        await asyncio.wait_for(entered.wait(), 10)
        live = await runtime.export_incident(handle.run_id, destination=tmp_path / "live.hx")
        report = await IncidentRecorder().verify(live)
        assert report.valid and "run_not_terminal_at_export" in report.issues
        await runtime.cancel()
        result = await handle.result()
        assert result.status is RunStatus.CANCELLED
        bundle = await runtime.export_incident(
            result.run_id, destination=tmp_path / "cancelled.hx", policy=ExportPolicy(include_payloads=True)
        )
    playback = await IncidentRecorder().playback(bundle)
    assert playback.report.valid and "model_attempt_incomplete" in playback.report.issues
    assert of_kind(playback, "model.interrupted")[0]["payload"] == {"outcome": "incomplete"}
    texts = [e.data for e in playback.events() if e.type.value == "text_delta"]
    assert texts and "partial ans" in json.dumps(texts)
