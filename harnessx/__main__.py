from __future__ import annotations

from harnessx.cli import main

main()
