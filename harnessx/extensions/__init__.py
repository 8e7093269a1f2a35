"""Extensions (harnessx 0.9.1's ``harnessx.extensions``): the ``Extension`` base class, the
``ExtensionContext`` it installs through, and ``ResultSpillExtension``. See
``docs/compatibility.md`` (LangSmith tracing is not supported yet)."""

from __future__ import annotations

from harnessx._extensions import Extension, ExtensionContext
from harnessx._result_spill import ResultSpillExtension

__all__ = ["Extension", "ExtensionContext", "ResultSpillExtension"]
