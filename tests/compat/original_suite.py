"""Run the original harnessx 0.9.1 test suite against the harnessx installed here.

The original's source distribution ships its tests. This script takes them (and only
them: never the original's package), runs each test file with the interpreter given by
``--python`` (default: this one, i.e. the venv that has our harnessx installed), and
prints passed / failed / errors / skipped per file as a Markdown table, the one in
``docs/compatibility.md``.

    python tests/compat/original_suite.py                  # pip downloads the sdist
    python tests/compat/original_suite.py --sdist harnessx-0.9.1.tar.gz
    python tests/compat/original_suite.py --reference-python /path/to/venv-with-0.9.1/bin/python

``--postgres`` starts a throwaway PostgreSQL cluster (``harnessx.testing``) for the files
that need one, named to them by ``HARNESS_TEST_POSTGRES_DSN`` (a fresh database per file
and interpreter); ``--postgres-dsn`` names a server instead.

``--stub-unsupported`` measures what the files that stop at import would do otherwise: a
``conftest.py`` put beside them makes each name and module of a feature this harnessx does
not support yet (``harnessx._unsupported``), and any name a module lacks, a stub whose use
raises "STUBBED"; the failures ``--failures`` lists then name their first error, so those
that are not about a stub show where this harnessx differs. It does nothing under the
original (which has everything). A measurement, not a result: the docs' table is without it.

``--reference-python`` runs the same files against a venv where the original itself is
installed (with pytest and pytest-asyncio), for a second column: a test the original
fails on from its sdist alone (it needs files its repository has and its sdist lacks, a
vendor SDK, or a service) is not one ours can be asked to pass.

Not collected by pytest (its name does not start with ``test_``).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DIST = "harnessx==0.9.1"
# The original's own pytest settings (from its pyproject.toml), minus ``pythonpath = ["."]``:
# that would put the sdist's own harnessx package first on sys.path.
PYTEST_INI = "[pytest]\nasyncio_mode = strict\nasyncio_default_fixture_loop_scope = function\n"


# The conftest of --stub-unsupported (see the module's docstring).
STUB_CONFTEST = """
import importlib, importlib.abc, importlib.machinery, sys, types

try:
    import harnessx._unsupported as unsupported
except ImportError:  # the original harnessx: nothing to stub
    unsupported = None


class Stub:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("STUBBED: a feature this harnessx does not support yet")

    def __class_getitem__(cls, item):
        return cls


def stub(name):
    return type(name, (Stub,), {})


class StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return stub(name)


class StubLoader(importlib.abc.Loader):
    def create_module(self, spec):
        return StubModule(spec.name)

    def exec_module(self, module):
        module.__path__ = []


class StubFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname.startswith("harnessx.") and unsupported.unsupported_module(fullname) is not None:
            return importlib.machinery.ModuleSpec(fullname, StubLoader(), is_package=True)
        return None


if unsupported is not None:
    sys.meta_path.insert(0, StubFinder())
    for name in ("providers.anthropic", "providers.openai", "providers.base", "providers.retry",
                 "providers.fallback", "memory", "types", "tools", "hooks", "errors", "runtime",
                 "recorder", "models", "registry", "backends", "backends.store", "backends.sqlite",
                 "messages", "execution", "engine", "core", "permissions", "durable", "loopguard"):
        importlib.import_module("harnessx." + name)
    for modname, module in list(sys.modules.items()):
        if not modname.startswith("harnessx") or isinstance(module, StubModule):
            continue
        lacking = module.__dict__.get("__getattr__")

        def fallback(name, lacking=lacking):
            if name.startswith("__"):
                raise AttributeError(name)
            if lacking is not None:
                try:
                    return lacking(name)
                except (ImportError, AttributeError):
                    pass
            return stub(name)

        module.__getattr__ = fallback
"""


@dataclass
class FileResult:
    name: str
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    note: str = ""
    failures: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.passed + self.failed + self.errors + self.skipped


def fetch_sdist(into: Path) -> Path:
    """``pip download`` the original's sdist (the registry's ordinary client)."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            ":all:",
            DIST,
            "-d",
            str(into),
        ],
        check=True,
    )
    found = sorted(into.glob("harnessx-*.tar.gz"))
    if not found:
        raise SystemExit(f"pip download left no harnessx sdist in {into}")
    return found[-1]


def extract_tests(sdist: Path, into: Path) -> Path:
    """Copy only ``tests/`` out of the sdist into ``into/tests``."""
    with tarfile.open(sdist) as archive:
        members = [m for m in archive.getmembers() if "/tests/" in m.name and m.isfile()]
        if not members:
            raise SystemExit(f"{sdist} has no tests/ folder")
        for member in members:
            relative = member.name.split("/tests/", 1)[1]
            target = into / "tests" / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            source = archive.extractfile(member)
            assert source is not None
            target.write_bytes(source.read())
    return into / "tests"


def run_file(
    python: str, tests: Path, name: str, timeout: float, dsn: str | None = None, *, stub: bool = False
) -> FileResult:
    """One test file in its own pytest process and its own scratch working directory."""
    result = FileResult(name)
    with tempfile.TemporaryDirectory(prefix="harnessx-orig-") as scratch:
        work = Path(scratch)
        shutil.copytree(tests, work / "tests")
        if stub:
            (work / "tests" / "conftest.py").write_text(STUB_CONFTEST)
        (work / "pytest.ini").write_text(PYTEST_INI)
        report = work / "report.xml"
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "HARNESSX_"))
        }
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        if dsn is not None:
            env["HARNESS_TEST_POSTGRES_DSN"] = dsn
        command = [
            python,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-c",
            str(work / "pytest.ini"),
            "--rootdir",
            str(work),
            f"--junitxml={report}",
            str(work / "tests" / name),
        ]
        try:
            completed = subprocess.run(
                command, cwd=work, env=env, capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            result.note = f"timed out after {timeout:g} s"
            result.errors = 1
            return result
        if not report.exists():
            result.errors = 1
            result.note = _last_line(completed.stdout + completed.stderr)
            return result
        _read_junit(report, result)
        if result.total == 0 or (result.errors and not result.passed and not result.failed):
            result.note = result.note or _collection_error(completed.stdout)
    return result


def _read_junit(report: Path, result: FileResult) -> None:
    root = ET.parse(report).getroot()
    for case in root.iter("testcase"):
        outcome = next((child for child in case if child.tag in ("failure", "error", "skipped")), None)
        label = f"{case.get('classname', '')}::{case.get('name', '')}"
        if outcome is None:
            result.passed += 1
        elif outcome.tag == "failure":
            result.failed += 1
            result.failures.append(f"{label} | {_why(outcome)}")
        elif outcome.tag == "error":
            result.errors += 1
            result.failures.append(f"{label} | {_why(outcome)}")
            if not case.get("name") or "collection" in (outcome.get("message") or ""):
                result.note = _first_error_line(outcome.text or outcome.get("message") or "")
        else:
            result.skipped += 1


def _why(outcome: ET.Element) -> str:
    """A failure's first error line (``STUBBED`` first when a stub raised it)."""
    text = (outcome.text or "") + (outcome.get("message") or "")
    lines = [line.strip()[1:].strip() for line in text.splitlines() if line.strip().startswith("E ")]
    why = (lines[0] if lines else outcome.get("message") or "")[:160]
    return f"STUBBED {why}" if "STUBBED" in text else why


def _collection_error(output: str) -> str:
    for line in output.splitlines():
        if line.startswith("E   ") and ("Error" in line or "error" in line):
            return line[4:].strip()
    return _last_line(output)


def _first_error_line(text: str) -> str:
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("E ") and ("Error" in stripped or "error" in stripped):
            return stripped[1:].strip()
    return _last_line(text)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def table(ours: list[FileResult], reference: dict[str, FileResult] | None) -> str:
    head = "| test file | tests | passed | failed | errors | skipped |"
    rule = "|---|---:|---:|---:|---:|---:|"
    if reference is not None:
        head += " original passes |"
        rule += "---:|"
    head += " first problem |"
    rule += "---|"
    lines = [head, rule]
    totals = FileResult("total")
    ref_total = 0
    for item in ours:
        counts = (item.total, item.passed, item.failed, item.errors, item.skipped)
        row = f"| `{item.name}` | " + " | ".join(str(n) for n in counts) + " |"
        if reference is not None:
            ref = reference.get(item.name)
            row += f" {ref.passed if ref else '?'} |"
            ref_total += ref.passed if ref else 0
        note = item.note.replace("|", "\\|")[:140]
        lines.append(row + f" {note} |")
        totals.passed += item.passed
        totals.failed += item.failed
        totals.errors += item.errors
        totals.skipped += item.skipped
    row = (
        f"| **total** | {totals.total} | {totals.passed} | {totals.failed} | {totals.errors} "
        f"| {totals.skipped} |"
    )
    if reference is not None:
        row += f" {ref_total} |"
    lines.append(row + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--sdist", type=Path, help="the original's sdist (default: pip download it)")
    source.add_argument("--source", type=Path, help="an unpacked sdist (its tests/ folder is used)")
    parser.add_argument("--python", default=sys.executable, help="interpreter with our harnessx installed")
    parser.add_argument("--reference-python", help="interpreter with the original harnessx 0.9.1 installed")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per test file")
    servers = parser.add_mutually_exclusive_group()
    servers.add_argument("--postgres", action="store_true", help="start a throwaway PostgreSQL cluster")
    servers.add_argument("--postgres-dsn", help="a PostgreSQL server for the tests that need one")
    parser.add_argument("--failures", action="store_true", help="also list each failing test")
    parser.add_argument(
        "--stub-unsupported", action="store_true", help="stub the features not supported yet (a measurement)"
    )
    parser.add_argument("files", nargs="*", help="only these test files (names like test_api_0_4.py)")
    args = parser.parse_args(argv)

    with contextlib.ExitStack() as stack:
        cluster = None
        if args.postgres:
            from harnessx.testing import ThrowawayCluster

            cluster = stack.enter_context(ThrowawayCluster())
        databases = itertools.count(1)

        def dsn_for() -> str | None:
            if cluster is not None:
                return cluster.create_database(f"suite_{next(databases)}")
            return args.postgres_dsn

        return _run_all(args, parser, dsn_for)


def _run_all(args: argparse.Namespace, parser: argparse.ArgumentParser, dsn_for: Any) -> int:
    with tempfile.TemporaryDirectory(prefix="harnessx-orig-suite-") as scratch:
        work = Path(scratch)
        if args.source is not None:
            tests = work / "tests"
            shutil.copytree(args.source / "tests", tests)
        else:
            sdist = args.sdist or fetch_sdist(work / "sdist")
            tests = extract_tests(sdist, work)
        names = sorted(p.name for p in tests.glob("test_*.py"))
        if args.files:
            unknown = sorted(set(args.files) - set(names))
            if unknown:
                parser.error(f"not test files of the original: {', '.join(unknown)}")
            names = [n for n in names if n in args.files]
        ours: list[FileResult] = []
        reference: dict[str, FileResult] | None = {} if args.reference_python else None
        for name in names:
            print(f"running {name} ...", file=sys.stderr, flush=True)
            ours.append(
                run_file(args.python, tests, name, args.timeout, dsn_for(), stub=args.stub_unsupported)
            )
            if reference is not None and args.reference_python:
                reference[name] = run_file(args.reference_python, tests, name, args.timeout, dsn_for())
    print(table(ours, reference))
    if args.failures:
        for item in ours:
            for label in item.failures:
                print(f"{item.name}: {label}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
