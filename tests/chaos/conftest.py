"""The chaos suite lives at the repository root (``chaos/``), beside ``harnessx``; make it
importable however pytest was started."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
