"""The suite's report: one row per scenario, printed, and written as JSON and Markdown."""

from __future__ import annotations

import json
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.checker import INVARIANTS
from chaos.runner import ScenarioResult

__all__ = ["Report", "machine"]

_COLUMNS = (
    "scenario",
    "backend",
    "runs",
    "completed",
    "faults",
    "kills mid-tool",
    "recoveries",
    "pruned",
    "resume p50",
    "resume p99",
    "violations",
    "time",
)


def machine() -> str:
    """CPU model, cores, memory, OS and Python, for the record."""
    model = platform.processor() or "unknown CPU"
    memory = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory = f", {int(line.split()[1]) / 1024 / 1024:.0f} GiB RAM"
                break
    except OSError:
        pass
    return (
        f"{model}, {os.cpu_count()} cores{memory}; {platform.system()} {platform.release()}; "
        f"Python {platform.python_version()}"
    )


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _row(result: ScenarioResult) -> list[str]:
    return [
        result.scenario,
        result.backend,
        str(result.runs),
        str(result.statuses.get("completed", 0)),
        str(result.faults_total),
        str(result.kills_mid_tool),
        f"{result.recoveries}/{result.affected_runs}",
        str(result.pruned_sessions),
        _seconds(result.resume_p50),
        _seconds(result.resume_p99),
        str(len(result.violations)),
        f"{result.seconds:.0f} s",
    ]


@dataclass
class Report:
    command: str
    settings: dict[str, Any]
    results: list[ScenarioResult] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    database: str = ""
    machine: str = field(default_factory=machine)
    started: str = ""
    seconds: float = 0.0

    @property
    def violations(self) -> int:
        return sum(len(r.violations) for r in self.results)

    @property
    def ok(self) -> bool:
        return self.violations == 0 and bool(self.results) and not any(r.error for r in self.results)

    def totals(self) -> dict[str, Any]:
        return {
            "runs": sum(r.runs for r in self.results),
            "completed": sum(r.statuses.get("completed", 0) for r in self.results),
            "faults": sum(r.faults_total for r in self.results),
            "kills_mid_tool": sum(r.kills_mid_tool for r in self.results),
            "recoveries": sum(r.recoveries for r in self.results),
            "pruned_sessions": sum(r.pruned_sessions for r in self.results),
            "violations": self.violations,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "command": self.command,
            "machine": self.machine,
            "database": self.database,
            "started": self.started,
            "seconds": round(self.seconds, 1),
            "settings": self.settings,
            "totals": self.totals(),
            "scenarios": [r.to_json() for r in self.results],
            "skipped": self.skipped,
            "invariants": INVARIANTS,
        }

    def table(self) -> str:
        rows = [list(_COLUMNS), *(_row(r) for r in self.results)]
        widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
        lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        totals = self.totals()
        lines.append(
            f"\n{totals['runs']} runs ({totals['completed']} completed), {totals['faults']} faults "
            f"({totals['kills_mid_tool']} kills mid-tool), {totals['pruned_sessions']} sessions pruned, "
            f"{_count(totals['violations'], 'violation')}"
            f" in {self.seconds:.0f} s"
        )
        for name, why in self.skipped.items():
            lines.append(f"skipped {name}: {why}")
        for result in self.results:
            if result.error:
                lines.append(f"ERROR {result.backend}/{result.scenario}: {result.error}")
        for result in self.results:
            for violation in result.violations[:10]:
                lines.append(f"VIOLATION {result.backend}/{result.scenario} {violation}")
            if len(result.violations) > 10:
                lines.append(f"... and {len(result.violations) - 10} more in {result.scenario}")
        return "\n".join(lines)

    def markdown(self) -> str:
        out = [
            f"Command: `{self.command}`",
            "",
            f"Machine: {self.machine}" + (f"; {self.database}" if self.database else ""),
            "",
            f"Started {self.started}, took {self.seconds:.0f} s. "
            + ("**All invariants held.**" if self.ok else f"**{_count(self.violations, 'violation')}.**"),
            "",
            "| " + " | ".join(_COLUMNS) + " |",
            "|" + "|".join("---" for _ in _COLUMNS) + "|",
        ]
        out += ["| " + " | ".join(_row(r)) + " |" for r in self.results]
        totals = self.totals()
        out += [
            "",
            f"Totals: {totals['runs']} runs, {totals['completed']} completed, {totals['faults']} faults, "
            f"{totals['kills_mid_tool']} kills mid-tool, {totals['recoveries']} recoveries, "
            + (
                f"{totals['pruned_sessions']} sessions pruned by retention (checked from its archive), "
                if totals["pruned_sessions"]
                else ""
            )
            + f"{_count(totals['violations'], 'violation')}.",
            "",
            "| scenario | faults by kind | tool calls (repeats) | takeovers | leaders | decisions "
            "| max resume |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in self.results:
            kinds = ", ".join(f"{k} {n}" for k, n in sorted(r.faults.items())) or "-"
            decisions = ", ".join(f"{k} {n}" for k, n in sorted(r.decisions.items())) or "-"
            out.append(
                f"| {r.scenario} | {kinds} | {r.invocations} ({r.repeated_invocations}) | {r.takeovers} | "
                f"{r.leaders} | {decisions} | {_seconds(r.resume_max)} |"
            )
        if self.skipped:
            out += ["", *(f"- skipped `{name}`: {why}" for name, why in self.skipped.items())]
        for r in self.results:
            extra = [
                *([f"- error: {r.error}"] if r.error else []),
                *(f"- violation: {v}" for v in r.violations[:20]),
                *(f"- note: {note}" for note in r.notes),
                *(f"- unexpected exit: {e.splitlines()[0] if e else e}" for e in r.unexpected_exits),
            ]
            if extra:
                out += ["", f"{r.backend}/{r.scenario}:", "", *extra]
        return "\n".join(out) + "\n"

    def write(self, directory: Path) -> tuple[Path, Path]:
        directory.mkdir(parents=True, exist_ok=True)
        as_json = directory / "chaos-report.json"
        as_md = directory / "chaos-report.md"
        as_json.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        as_md.write_text(self.markdown())
        return as_json, as_md
