"""``python -m chaos``."""

from __future__ import annotations

from chaos.cli import main

main()
