"""The Dockerfile, without a container engine: hadolint lints it, Docker's own parser (the
``dockerfile`` package wraps BuildKit's) reads it for the properties the deployment relies
on, and the package is built from exactly the build context the Dockerfile and
.dockerignore give, to show the image would hold a complete harnessx with the PostgreSQL
and Temporal extras."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

from deploy_support import REPO, need_module, need_tool, run_tool

DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
VENV = "/opt/harnessx"
UID = "10001"


def commands(path: Path = DOCKERFILE) -> list[Any]:
    dockerfile = need_module("dockerfile")
    return list(dockerfile.parse_file(str(path)))


def stages(parsed: list[Any]) -> list[list[Any]]:
    found: list[list[Any]] = []
    for command in parsed:
        if command.cmd.upper() == "FROM":
            found.append([])
        if found:
            found[-1].append(command)
    return found


def build_args(parsed: list[Any]) -> dict[str, str]:
    args = {}
    for command in parsed:
        if command.cmd.upper() == "FROM":
            break
        if command.cmd.upper() == "ARG":
            name, _, default = command.value[0].partition("=")
            args[name] = default
    return args


def hadolint(path: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "hadolint.yaml"
    # Every rule at every level fails, and the image must carry a semver version label.
    config.write_text("failure-threshold: style\nlabel-schema:\n  org.opencontainers.image.version: semver\n")
    return run_tool(need_tool("hadolint"), "--no-color", "--config", str(config), str(path))


def test_hadolint_passes(tmp_path: Path) -> None:
    result = hadolint(DOCKERFILE, tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == "", result.stdout + result.stderr


def test_hadolint_catches_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN cd /src && pip install .\nCMD harness-worker\n")
    result = hadolint(bad, tmp_path)
    assert result.returncode != 0
    for rule in ("DL3007", "DL3003", "DL3025"):  # :latest, cd in RUN, shell-form CMD
        assert rule in result.stdout


def test_multi_stage_build_on_python_311_slim() -> None:
    parsed = commands()
    args = build_args(parsed)
    built = stages(parsed)
    assert len(built) >= 2
    for stage in built:
        base = stage[0].value[0]
        for name, default in args.items():
            base = base.replace(f"${{{name}}}", default).replace(f"${name}", default)
        assert re.fullmatch(r"python:3\.11-slim(-[a-z]+)?", base), base
    assert built[0][0].value[1:] == ("AS", "build")
    # The runtime stage takes the built venv from the build stage.
    copies = [c for c in built[-1] if c.cmd.upper() == "COPY" and "--from=build" in c.flags]
    assert [c.value for c in copies] == [(VENV, VENV)]


def test_build_stage_installs_the_postgres_and_temporal_extras_into_a_venv() -> None:
    build = stages(commands())[0]
    runs = " && ".join(c.value[0] for c in build if c.cmd.upper() == "RUN")
    assert f"python -m venv {VENV}" in runs
    found = re.search(rf"{VENV}/bin/pip install [^&]*\"\.\[([a-z,]+)\]\"", runs)
    assert found, runs
    # The same image runs `harness-worker --temporal` (deploy/kubernetes/temporal).
    assert set(found.group(1).split(",")) >= {"postgres", "temporal"}, found.group(0)
    # ... and the build proves both bindings load, so a broken extra fails the build.
    assert "import asyncpg" in runs
    assert re.search(r"python -c \"import [^\"]*temporalio[^\"]*harnessx\.temporal\._cli", runs), runs


def test_runtime_stage_runs_as_non_root_with_an_exec_form_command() -> None:
    final = stages(commands())[-1]
    users = [c.value[0] for c in final if c.cmd.upper() == "USER"]
    assert users and users[-1].split(":")[0] == UID
    assert final[-1].cmd.upper() == "CMD", "CMD comes last"
    (cmd,) = [c for c in final if c.cmd.upper() == "CMD"]
    assert cmd.json and cmd.value == ("harness-worker",)
    # Any ENTRYPOINT must be exec-form too (a shell would swallow SIGTERM and skip the drain).
    assert all(c.json for c in final if c.cmd.upper() == "ENTRYPOINT")
    env = {}
    for command in final:
        if command.cmd.upper() == "ENV":
            env.update(zip(command.value[::2], command.value[1::2], strict=True))
    assert env["PATH"].startswith(f"{VENV}/bin:")
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"  # the root file system is read-only
    (signal,) = [c.value[0] for c in final if c.cmd.upper() == "STOPSIGNAL"]
    assert signal == "SIGTERM"


def test_image_version_is_the_package_version() -> None:
    import tomllib

    version = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    final = stages(commands())[-1]
    labels = {}
    for command in final:
        if command.cmd.upper() == "LABEL":
            labels.update(zip(command.value[::2], command.value[1::2], strict=True))
    assert labels["org.opencontainers.image.version"].strip('"') == version


# --------------------------------------------------------------------- build context


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go filepath.Match plus ``**``) as a regex over relative paths."""
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out += "[" + pattern[i + 1 : end].replace("^", "\\^", 1) + "]"
            i = end + 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out)


def dockerignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    rules = []
    for raw in DOCKERIGNORE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keep = line.startswith("!")
        rules.append((keep, _pattern_regex(line.lstrip("!").strip("/"))))
    return rules


def ignored(relative: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""
    parts = relative.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    verdict = False
    for keep, regex in rules:
        if any(regex.fullmatch(candidate) for candidate in candidates):
            verdict = not keep
    return verdict


def context_sources() -> list[str]:
    """Sources of every COPY/ADD that reads the build context (not --from)."""
    sources = []
    for command in commands():
        if command.cmd.upper() in ("COPY", "ADD") and not any(f.startswith("--from") for f in command.flags):
            sources.extend(command.value[:-1])
    return sources


def test_dockerignore_keeps_what_the_dockerfile_copies() -> None:
    rules = dockerignore_rules()
    sources = context_sources()
    assert {"pyproject.toml", "README.md", "harnessx", "harness_workers", "supervisor"} <= set(sources)
    for source in sources:
        assert (REPO / source).exists(), source
        assert not ignored(source, rules), f"{source} is copied but .dockerignore excludes it"
    for excluded in (
        ".git", ".venv", "tests/conftest.py", "harnessx/__pycache__/x.pyc", "docs/architecture.md",
        "deploy/systemd/harnessx.env.example", "chaos/cli.py", "harnessx/x.sqlite3", "Dockerfile",
    ):  # fmt: skip
        assert ignored(excluded, rules), excluded
    assert not ignored("docs/operations.md", rules)
    assert not ignored("harnessx/store/sql/sqlite.sql", rules)


def test_package_built_from_the_build_context_is_complete(tmp_path: Path) -> None:
    rules = dockerignore_rules()
    context = tmp_path / "context"
    shipped: set[str] = set()
    for source in context_sources():
        origin = REPO / source
        files = [origin] if origin.is_file() else sorted(p for p in origin.rglob("*") if p.is_file())
        for file in files:
            relative = file.relative_to(REPO).as_posix()
            if ignored(relative, rules):
                continue
            (context / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(file, context / relative)
            shipped.add(relative)
    # `pip install ".[postgres]"` builds this wheel first (in an isolated build environment).
    result = run_tool(
        sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(context),
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    # The distribution's own name: 'harnessx' on the package index is another project.
    (wheel,) = (tmp_path / "dist").glob("harnessx_durable-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        meta = archive.read(metadata).decode()
        scripts = archive.read(entry_points).decode()
    # Every module, SQL file and migration of the three packages is in the wheel.
    data = {s for s in shipped if s.split("/")[0] in ("harnessx", "harness_workers", "supervisor")}
    wanted = {s for s in data if s.endswith((".py", ".sql", "py.typed"))}
    assert wanted - names == set()
    assert any(n.startswith("harnessx/store/migrations/sqlite/") for n in names)
    assert any(n.startswith("harnessx/store/sql/") for n in names)
    for script in ("harnessx", "harness-worker", "harness-supervisor"):
        assert re.search(rf"^{script} = ", scripts, re.MULTILINE), script
    assert re.search(r"^Name: harnessx-durable$", meta, re.MULTILINE), meta[:200]
    assert "Provides-Extra: postgres" in meta
    assert re.search(r"^Requires-Dist: asyncpg.*extra == \"postgres\"", meta, re.MULTILINE)
    assert "Provides-Extra: temporal" in meta
    for requirement in ("temporalio", "redis"):
        assert re.search(rf"^Requires-Dist: {requirement}.*extra == \"temporal\"", meta, re.MULTILINE), (
            requirement
        )
