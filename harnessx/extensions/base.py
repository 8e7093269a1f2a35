"""0.9.1's module of the extension contract; the names live in ``harnessx.extensions``."""

from __future__ import annotations

from harnessx._extensions import Extension, ExtensionContext

__all__ = ["Extension", "ExtensionContext"]
