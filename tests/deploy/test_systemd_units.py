"""deploy/systemd: the units pass ``systemd-analyze verify`` and ``security``, the sysusers file
passes ``systemd-sysusers``, and the settings agree with the worker's lease and drain timings."""

from __future__ import annotations

import re
import shutil
from collections import defaultdict
from pathlib import Path

import click
import pytest
from deploy_support import DEPLOY, need_tool, run_tool

from harness_workers.cli import main as worker_main
from harnessx.cli import migrate as migrate_command
from supervisor.cli import main as supervisor_main

SYSTEMD = DEPLOY / "systemd"
WORKER = "harness-worker@.service"
SUPERVISOR = "harness-supervisor.service"
MIGRATE = "harnessx-migrate.service"
CONSOLE = "harnessx-console.service"
TARGET = "harnessx.target"
UNIT_FILES = (WORKER, SUPERVISOR, MIGRATE, CONSOLE, TARGET)
SERVICES = (WORKER, SUPERVISOR, MIGRATE, CONSOLE)
# Unit names as verified: the template as one instance (its name is its metrics port).
VERIFY_NAMES = ("harness-worker@9471.service", SUPERVISOR, MIGRATE, CONSOLE, TARGET)
# systemd-analyze security: 0.0 (locked down) .. 10.0 (exposed); 2.0 is comfortably "OK".
MAX_EXPOSURE = 2.0

Unit = dict[str, dict[str, list[str]]]


def parse_unit(path: Path) -> Unit:
    """Sections of a unit file, each key with all its values in order (keys may repeat)."""
    sections: Unit = {}
    current: dict[str, list[str]] | None = None
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], defaultdict(list))
            continue
        assert current is not None, f"{path.name}: setting outside a section: {line!r}"
        key, sep, value = line.partition("=")
        assert sep, f"{path.name}: not a setting: {line!r}"
        current[key.strip()].append(value.strip())
    return sections


def one(unit: Unit, section: str, key: str) -> str:
    values = unit.get(section, {}).get(key, [])
    assert len(values) == 1, f"[{section}] {key}= expected once, found {values}"
    return values[0]


def seconds(span: str) -> float:
    """A systemd time span such as ``45s``, ``1min 30s`` or ``90``."""
    units = {"ms": 0.001, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "": 1}
    total = 0.0
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", span)
    assert parts, f"not a time span: {span!r}"
    for number, unit in parts:
        total += float(number) * units[unit]
    return total


def env_file(path: Path) -> dict[str, str]:
    """An EnvironmentFile= as systemd reads it (KEY=VALUE lines, # comments)."""
    values: dict[str, str] = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        key, sep, value = line.partition("=")
        assert sep and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key), f"bad environment line {raw!r}"
        values[key] = value.strip().strip("\"'")
    return values


def cli_default(command: click.Command, name: str) -> object:
    (param,) = [p for p in command.params if p.name == name]
    return param.default


def cli_envvars(*commands: click.Command) -> set[str]:
    found: set[str] = set()
    for command in commands:
        for param in command.params:
            envvar = getattr(param, "envvar", None)
            if isinstance(envvar, str):
                found.add(envvar)
    return found


def fake_root(tmp_path: Path, units: dict[str, str]) -> Path:
    """A file system root for ``systemd-analyze --root``: systemd's own units, ours in
    /etc/systemd/system, and an executable at every path an ExecStart= names."""
    root = tmp_path / "root"
    vendor = Path("/usr/lib/systemd/system")
    if not vendor.is_dir():
        vendor = Path("/lib/systemd/system")
    shutil.copytree(vendor, root / "usr/lib/systemd/system", symlinks=True)
    etc = root / "etc/systemd/system"
    etc.mkdir(parents=True)
    for name, text in units.items():
        (etc / name).write_text(text, encoding="utf-8")
        for line in text.splitlines():
            if line.startswith("ExecStart="):
                binary = root / line.partition("=")[2].split()[0].lstrip("-@:+!").lstrip("/")
                binary.parent.mkdir(parents=True, exist_ok=True)
                binary.write_text("#!/bin/sh\nexit 0\n")
                binary.chmod(0o755)
    return root


def shipped_units() -> dict[str, str]:
    return {name: (SYSTEMD / name).read_text(encoding="utf-8") for name in UNIT_FILES}


def verify(root: Path, *names: str) -> str:
    analyze = need_tool("systemd-analyze")
    result = run_tool(
        analyze, "verify", f"--root={root}", "--man=no", "--generators=no", "--recursive-errors=no", *names
    )
    output = (result.stdout + result.stderr).strip()
    # verify exits 0 on settings it ignores ("Unknown key", "Failed to parse ..."), so any
    # diagnostic at all counts as a failure.
    return output if result.returncode == 0 else f"exit {result.returncode}: {output}"


def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    assert verify(fake_root(tmp_path, shipped_units()), *VERIFY_NAMES) == ""


@pytest.mark.parametrize(
    ("old", "new", "complaint"),
    [
        ("NoNewPrivileges=yes", "NoNewPrivilege=yes", "Unknown key"),
        ("WatchdogSec=45s", "WatchdogSec=forty-five", "Failed to parse"),
        ("RestrictAddressFamilies=AF_UNIX", "RestrictAddressFamilies=AF_UNIKS", "address famil"),
    ],
)
def test_verify_catches_a_broken_worker_unit(tmp_path: Path, old: str, new: str, complaint: str) -> None:
    units = shipped_units()
    assert old in units[WORKER]
    units[WORKER] = units[WORKER].replace(old, new)
    assert complaint in verify(fake_root(tmp_path, units), "harness-worker@9471.service")


@pytest.mark.parametrize("unit", ["harness-worker@9471.service", SUPERVISOR, MIGRATE])
def test_units_are_locked_down(tmp_path: Path, unit: str) -> None:
    analyze = need_tool("systemd-analyze")
    root = fake_root(tmp_path, shipped_units())
    result = run_tool(
        analyze,
        "security",
        "--offline=true",
        f"--root={root}",
        "--no-pager",
        f"--threshold={int(MAX_EXPOSURE * 10)}",
        unit,
    )
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout)
    assert match, result.stdout + result.stderr
    assert result.returncode == 0, result.stdout + result.stderr
    assert float(match[1]) <= MAX_EXPOSURE


def test_sysusers_file_creates_the_service_user(tmp_path: Path) -> None:
    sysusers = need_tool("systemd-sysusers")
    (tmp_path / "etc").mkdir()
    result = run_tool(sysusers, "--dry-run", f"--root={tmp_path}", str(SYSTEMD / "harnessx.sysusers.conf"))
    assert result.returncode == 0, result.stderr
    assert "Creating user 'harnessx'" in result.stdout + result.stderr


def test_worker_unit_matches_the_worker_timings() -> None:
    unit = parse_unit(SYSTEMD / WORKER)
    env = env_file(SYSTEMD / "harnessx.env.example")
    service = unit["Service"]
    assert one(unit, "Service", "Type") == "notify"
    assert one(unit, "Service", "NotifyAccess") == "main"
    assert one(unit, "Service", "Restart") == "always"
    assert one(unit, "Service", "KillSignal") == "SIGTERM"
    # WATCHDOG=1 goes out on every worker heartbeat, every lease_seconds / 3: the watchdog
    # must allow several missed beats, and not fire before a lease could expire.
    for lease in (
        float(env["HARNESSX_LEASE_SECONDS"]),
        float(str(cli_default(worker_main, "lease_seconds"))),
    ):
        watchdog = seconds(one(unit, "Service", "WatchdogSec"))
        assert watchdog >= 3 * (lease / 3) + 5, (watchdog, lease)
    # SIGTERM drains for at most the drain timeout; systemd must not SIGKILL before that.
    for drain in (
        float(env["HARNESSX_DRAIN_TIMEOUT"]),
        float(str(cli_default(worker_main, "drain_timeout"))),
    ):
        assert seconds(one(unit, "Service", "TimeoutStopSec")) >= drain + 15
    # One instance per metrics port: the instance name is the port.
    exec_start = one(unit, "Service", "ExecStart")
    assert exec_start.split()[0].endswith("/harness-worker")
    assert "--metrics-addr 127.0.0.1:%i" in exec_start
    assert "-/etc/harnessx/worker-%i.env" in service["EnvironmentFile"]


@pytest.mark.parametrize("name", SERVICES)
def test_services_are_hardened(name: str) -> None:
    unit = parse_unit(SYSTEMD / name)
    expected = {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "yes",
        "User": "harnessx",
        "Group": "harnessx",
        "StateDirectory": "harnessx",
        "ReadWritePaths": "/var/lib/harnessx",
        "CapabilityBoundingSet": "",
        "EnvironmentFile": "/etc/harnessx/harnessx.env",
    }
    for key, value in expected.items():
        assert value in unit["Service"][key], (name, key)
    families = one(unit, "Service", "RestrictAddressFamilies").split()
    assert sorted(families) == ["AF_INET", "AF_INET6", "AF_UNIX"]
    assert "DynamicUser" not in unit["Service"]  # all units share one user and the SQLite file


def test_supervisor_unit_has_no_watchdog() -> None:
    # harness-supervisor sends READY=1 and STOPPING=1 but no WATCHDOG=1 (see
    # test_systemd_notify.py): a WatchdogSec= would kill a healthy supervisor.
    unit = parse_unit(SYSTEMD / SUPERVISOR)
    assert one(unit, "Service", "Type") == "notify"
    assert one(unit, "Service", "Restart") == "always"
    assert "WatchdogSec" not in unit["Service"]
    assert "--metrics-addr 127.0.0.1:9465" in one(unit, "Service", "ExecStart")


def test_migrate_unit_runs_harnessx_migrate() -> None:
    unit = parse_unit(SYSTEMD / MIGRATE)
    assert one(unit, "Service", "Type") == "oneshot"
    assert one(unit, "Service", "ExecStart").split()[-1] == "migrate"


def test_environment_example_names_real_options() -> None:
    env = env_file(SYSTEMD / "harnessx.env.example")
    known = cli_envvars(worker_main, supervisor_main, migrate_command)
    unknown = {key for key in env if key.startswith("HARNESSX_") and key not in known}
    assert not unknown, f"not an option of harness-worker / harness-supervisor / harnessx migrate: {unknown}"
    assert env["HARNESSX_DSN"].startswith("postgresql://")
    # Each unit passes its own --metrics-addr; a shared value would make instances collide.
    assert "HARNESSX_METRICS_ADDR" not in env
    text = (SYSTEMD / "harnessx.env.example").read_text(encoding="utf-8")
    assert "install -m 0600 -o root -g harnessx" in text


def test_console_unit_serves_on_loopback_with_its_tokens() -> None:
    from harnessx.console._command import console

    unit = parse_unit(SYSTEMD / CONSOLE)
    assert one(unit, "Service", "Type") == "notify"
    exec_start = one(unit, "Service", "ExecStart").split()
    assert exec_start[:2] == ["/opt/harnessx/bin/harnessx", "console"]
    assert "--insecure-no-auth" not in exec_start
    assert exec_start[exec_start.index("--bind") + 1] == "127.0.0.1:8080"  # a proxy in front ends TLS
    # The tokens are a root-only file handed over as a credential (%d: its directory).
    name, _, source = one(unit, "Service", "LoadCredential").partition(":")
    assert exec_start[exec_start.index("--tokens-file") + 1] == f"%d/{name}"
    assert source == "/etc/harnessx/console-tokens"
    known = {option for param in console.params for option in param.opts}
    assert {part for part in exec_start if part.startswith("--")} <= known
