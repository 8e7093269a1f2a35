"""Running the compatibility probes (``tests/compat/probes``) and reading what they print:
shared by the differential tests and the Temporal ones."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["PROBES", "clean_env", "flatten", "observe"]

PROBES = Path(__file__).resolve().parent / "compat" / "probes"


def clean_env() -> dict[str, str]:
    # Neither package may see the other: no PYTHONPATH, and the probe runs outside the tree.
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def observe(python: str, probe: str, workdir: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    done = subprocess.run(
        [python, str(PROBES / f"{probe}.py")],
        capture_output=True,
        text=True,
        cwd=workdir,
        env={**clean_env(), **(env or {})},
        timeout=300,
    )
    assert done.returncode == 0, f"{probe} failed under {python}:\n{done.stderr[-4000:]}"
    observed: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return observed


def flatten(value: Any, path: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(flatten(item, f"{path}.{key}" if path else key))
        return flat if flat else {path: value}
    if isinstance(value, list) and value and any(isinstance(item, dict | list) for item in value):
        flat = {}
        for index, item in enumerate(value):
            flat.update(flatten(item, f"{path}[{index}]"))
        return flat
    return {path: value}
