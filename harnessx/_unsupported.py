"""Names and modules of the original harnessx 0.9.1 that this harnessx does not provide.

Importing one raises an ``ImportError`` that says which feature it belongs to and points at
``docs/compatibility.md``, instead of a bare "cannot import name". Names go through the
module ``__getattr__`` of ``harnessx`` (consulted only for names the package lacks), and
modules through a finder placed last on ``sys.meta_path``: it answers only for a
``harnessx.*`` module no other finder found, so a module added later always wins.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

__all__ = ["FEATURES", "install_finder", "unsupported_attribute", "unsupported_module", "unsupported_name"]

DOCS = "docs/compatibility.md"

# feature -> (top-level names, module paths)
FEATURES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "knowledge bundles": (
        ("GitSource", "KnowledgeManager", "OKFBundle", "OKFConcept"),
        ("harnessx.knowledge",),
    ),
    "subagents": (("SubAgent",), ("harnessx.subagents",)),
    "MCP servers": (("MCPManager", "MCPServerConfig", "MCPToolInfo"), ("harnessx.mcp",)),
    "skills": (("Skill", "SkillManager"), ("harnessx.skills",)),
    "media content blocks": (("ContentBlock",), ()),
    "sandboxes": (
        ("Sandbox", "SandboxConfig", "SandboxResult", "ExecutionBackend"),
        ("harnessx.sandbox", "harnessx.openshell", "harnessx._openshell_policy"),
    ),
    "built-in tool bundles (filesystem, bash, web, memory, ask)": ((), ("harnessx.builtin",)),
    "evals": (("evaluate_agent", "evaluate_agent_async"), ("harnessx.evals",)),
    "LangSmith tracing (the Extension base class and ResultSpillExtension are here)": (
        ("LangSmithExtension",),
        ("harnessx.extensions.langsmith",),
    ),
    "the Gemini, OpenRouter and Azure OpenAI providers": (
        (),
        ("harnessx.providers.gemini", "harnessx.providers.openrouter", "harnessx.providers.azure_openai"),
    ),
    # TemporalBackend and RedisEvents are here (harnessx.temporal); the original's worker
    # and workflow modules were its internals.
    "the original's Temporal worker internals (use harnessx.temporal, docs/temporal.md)": (
        (),
        ("harnessx.backends.temporal_worker", "harnessx.backends.temporal_workflow"),
    ),
    "artifact stores": (("S3ArtifactStore",), ("harnessx.artifacts",)),
    "long-term and vector memory": (
        ("LongTermMemory", "AgentMemory", "VectorMemoryStore", "InMemoryVectorStore"),
        (),
    ),
    "structured decisions (JEV)": ((), ("harnessx.decisions",)),
}

# The original's internal modules: imported by its own tests, never public API (none left:
# harnessx.engine says itself which of its names are internal).
INTERNAL_MODULES: tuple[str, ...] = ()

# Names of the original's public modules that belong to an unsupported feature, or are
# the internals of its engine (functions over its run-state dict, which this harnessx's
# engine does not have): module -> name -> the feature, or None for an internal.
_MODULE_NAMES: dict[str, dict[str, str | None]] = {
    "harnessx.messages": {"MEDIA_KINDS": "media content blocks"},
    # Its engine's accounting of heartbeat-reported usage, on its Temporal activities.
    "harnessx.execution": {"apply_accounting": None},
}

_BY_NAME = {name: feature for feature, (names, _) in FEATURES.items() for name in names}
_BY_MODULE = {module: feature for feature, (_, modules) in FEATURES.items() for module in modules}


def _feature_of_module(fullname: str) -> str | None:
    for module, feature in _BY_MODULE.items():
        if fullname == module or fullname.startswith(module + "."):
            return feature
    return None


def unsupported_name(name: str) -> ImportError | None:
    """The error for importing ``name`` from ``harnessx``, if it is a known unsupported one."""
    feature = _BY_NAME.get(name)
    if feature is None:
        return None
    return ImportError(
        f"harnessx.{name} belongs to {feature} of the original harnessx 0.9.1, which this harnessx does "
        f"not support yet; {DOCS} lists what is supported and what is not",
        name="harnessx",
    )


def unsupported_module(fullname: str) -> ImportError | None:
    feature = _feature_of_module(fullname)
    if feature is not None:
        return ImportError(
            f"{fullname} belongs to {feature} of the original harnessx 0.9.1, which this harnessx does not "
            f"support yet; {DOCS} lists what is supported and what is not",
            name=fullname,
        )
    if fullname in INTERNAL_MODULES:
        return ImportError(
            f"{fullname} is an internal module of the original harnessx 0.9.1 with no counterpart here; "
            f"use the public API ({DOCS} maps every public name)",
            name=fullname,
        )
    return None


def unsupported_attribute(module: str, name: str) -> ImportError | AttributeError:
    """The error for ``from <module> import <name>`` of a name this module does not have:
    what it belongs to when it is a known name of the original's, else the plain one."""
    known = _MODULE_NAMES.get(module, {})
    if name not in known:
        return AttributeError(f"module {module!r} has no attribute {name!r}")
    feature = known[name]
    if feature is None:
        return ImportError(
            f"{module}.{name} is internal to the original harnessx 0.9.1's engine (it works on that "
            f"engine's run-state dict) and has no counterpart here; use the public API ({DOCS})",
            name=module,
        )
    return ImportError(
        f"{module}.{name} belongs to {feature} of the original harnessx 0.9.1, which this harnessx does "
        f"not support yet; {DOCS} lists what is supported and what is not",
        name=module,
    )


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("harnessx."):
            return None
        error = unsupported_module(fullname)
        if error is not None:
            raise error
        return None


_FINDER = _Finder()


def install_finder() -> None:
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_FINDER)
