"""Compare the public surface of this harnessx with the original harnessx 0.9.1's.

For every public module of the original (listed by the original interpreter from its own
installed package, minus the features this harnessx does not support yet), and every
public name in it (``__all__`` when the module has one, else the names it defines or
re-exports from harnessx), a small introspection program run under both interpreters
records: whether the name exists (and, when not, whether ``harnessx._unsupported`` names
it: importing it raises the ``ImportError`` that points at docs/compatibility.md), its
kind (class, exception, enum, function, module, constant), the ``inspect.signature`` of
classes and functions (parameter names, kinds, defaults as repr), a class's public
methods and properties with their signatures, an enum's members and values, a class's
public bases. The script then prints the differences grouped by module.

    python tests/compat/surface_sweep.py
    python tests/compat/surface_sweep.py --original-python /path/to/venv-with-0.9.1/bin/python
    python tests/compat/surface_sweep.py --json      # the differences as JSON

``harnessx.providers.openai`` of 0.9.1 imports only with the ``openai`` package installed
beside it (``pip install 'harnessx[postgres,openai]==0.9.1'``); without it the module is not
compared, and the summary says so.

What counts as a difference is what a program written for 0.9.1 could trip on: a name,
method, property, parameter, enum member or base the original has and ours lacks; a
parameter whose kind, position or default differs; a parameter ours requires that the
original does not have; a different kind of object. What ours adds (a keyword with a
default, a method, a base) is an extension and is not listed. The count it ends with is
the one docs/compatibility.md quotes (*The public surface, swept*).

Not collected by pytest (its name does not start with ``test_``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from typing import Any

ORIGINAL_PYTHON = "/work/main/.venv-original/bin/python"

# Modules of features this harnessx does not support yet (harnessx._unsupported), left out
# whole; ``harnessx.builtin.planning`` is supported, the other bundles are not.
OUT_OF_SCOPE_MODULES = (
    "harnessx.knowledge",
    "harnessx.subagents",
    "harnessx.mcp",
    "harnessx.skills",
    "harnessx.sandbox",
    "harnessx.openshell",
    "harnessx.evals",
    "harnessx.decisions",
    "harnessx.artifacts",
    "harnessx.extensions.langsmith",
    "harnessx.providers.gemini",
    "harnessx.providers.openrouter",
    "harnessx.providers.azure_openai",
    "harnessx.backends.temporal_worker",
    "harnessx.backends.temporal_workflow",
)
IN_SCOPE_BUILTIN = ("harnessx.builtin.planning",)

# Names of out-of-scope features that a public module of the original re-exports without
# harnessx._unsupported naming them (the providers gated on their SDKs).
OUT_OF_SCOPE_NAMES = {
    "harnessx.providers": {"GeminiProvider", "OpenRouterProvider", "AzureOpenAIProvider"},
}


# Differences documented in docs/compatibility.md: (module or "*", a pattern of the line) -> status.
STORE_INTERNALS = "deliberate: the stores' internal API (docs/compatibility.md, Stores)"
ARTIFACTS = "not yet supported: artifact stores"
TEMPORAL = "deliberate: this project's own Temporal binding (docs/temporal.md)"
ENGINE = "deliberate: internal to 0.9.1's engine, no counterpart (its run-state dict, its wiring)"
WORDING = "deliberate: the same guidance in this project's own words"
NAME_ONLY = "differs in a positional parameter's name only (called positionally)"
KNOWN: dict[tuple[str, str], str] = {
    (
        "*",
        r"Backend\.(append_events|claim|create_run|create_session|release|renew|save_run|set_control"
        r"|get_control|find_request|encode|decode|table|transaction|postgres|supports_recording)\b",
    ): STORE_INTERNALS,
    ("*", r"^(PostgresBackend|SQLiteBackend): not a subclass of SQLStore"): STORE_INTERNALS,
    (
        "*",
        r"^(SQLStore|PostgresTransaction|SQLiteTransaction|TABLES|MIGRATION_CHECKSUM|JOURNAL_CHECKSUM"
        r"|JOURNAL_TABLE|retry_transaction|postgres_bindings|checkpoint|record|wire): missing",
    ): STORE_INTERNALS,
    ("*", r"artifact_store|_artifact\b"): ARTIFACTS,
    ("harnessx.backends.temporal", r""): TEMPORAL,
    ("*", r"^(RunHandle|RunStream)(\(\.\.\.\)|: not a subclass)"): (
        "deliberate: built by the runtime and the agent, never by a program"
    ),
    ("*", r"^FallbackProvider\.(call_budget|request_target|set_reply_budget|streams_natively):"): ENGINE,
    (
        "*",
        r"^(drive|emit_hook|journal_record|resolve_entry|install_extensions|close_extensions"
        r"|validate_extensions|complete_extensions|model_timeout_from_wire|closing_stream): missing",
    ): ENGINE,
    ("*", r"^(PLANNING_GUIDANCE|WRITE_TODOS_DESCRIPTION|SUMMARY_SYSTEM): "): WORDING,
    ("*", r"^select_tools: missing"): "deliberate: internal to 0.9.1's built-in bundles (a private module's)",
    ("*", r"^(install_subagent|prepare_subagents): missing"): "not yet supported: subagents",
    ("*", r"^DEFAULT_(ATTEMPTS|BACKOFF_SECONDS): missing"): (
        "deliberate: 0.9.1 defines them and uses neither (RetryPolicy's defaults are 4 and 0.5 s)"
    ),
    ("*", r"^PostgresBackend\(\.\.\.\): ('connection_string' is KEYWORD_ONLY|positional order)"): (
        "same: the DSN is the first argument, or connection_string="
    ),
    ("*", r"^__version__: "): "deliberate: the version of this distribution (harnessx-durable)",
    ("*", r"^BUILTIN_PROVIDERS: \["): "not yet supported: the Gemini, OpenRouter and Azure OpenAI providers",
    ("*", r"^(Extension|ResultSpillExtension)\.install\(\.\.\.\)|^accepts_cache\(\.\.\.\)"): NAME_ONLY,
    ("*", r"^(Anthropic|OpenAI)Provider\(\.\.\.\): ('client'|positional order)"): (
        "same: a client given first is taken for the client (docs/compatibility.md, providers)"
    ),
    ("*", r"\.read_events\(\.\.\.\): 'after' defaults to 0"): "same: a cursor string or a number",
    ("*", r"^ToolRegistry\.load_builtin\(\.\.\.\): no \*\*options"): (
        "not yet supported: the options of the other built-in bundles (sandbox, base_path)"
    ),
}


# Run under each interpreter with a working directory outside any checkout, so that the
# installed harnessx is the one imported. argv[1]: "list" or a JSON list of modules.
INTROSPECT = r"""
import dataclasses, enum, importlib, inspect, json, os, re, sys, types, typing, warnings

warnings.simplefilter("ignore")
ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def list_modules():
    import harnessx
    root = os.path.dirname(harnessx.__file__)
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")) and d != "tests")
        rel = os.path.relpath(folder, root)
        prefix = "harnessx" if rel == "." else "harnessx." + rel.replace(os.sep, ".")
        if "__init__.py" not in files:
            continue
        found.append(prefix)
        for f in sorted(files):
            if f.endswith(".py") and not f.startswith("_"):
                found.append(prefix + "." + f[:-3])
    return sorted(found)


def text(value):
    try:
        r = repr(value)
    except Exception as exc:
        r = f"<repr failed: {type(exc).__name__}>"
    return ADDRESS.sub("", r)[:200]


def signature(obj):
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    params = []
    for p in sig.parameters.values():
        if p.name.startswith("_"):
            continue  # a private keyword, not for programs
        default = None if p.default is inspect.Parameter.empty else text(
            p.default.value if isinstance(p.default, enum.Enum) else p.default)
        params.append({"name": p.name, "kind": p.kind.name, "default": default,
                       "required": p.default is inspect.Parameter.empty})
    return params


def member(cls, name):
    try:
        raw = inspect.getattr_static(cls, name)
    except AttributeError:
        return None
    if isinstance(raw, property) or type(raw).__name__ in ("cached_property", "getset_descriptor"):
        return {"kind": "property"}
    if isinstance(raw, staticmethod):
        return {"kind": "staticmethod", "signature": signature(raw.__func__)}
    if isinstance(raw, classmethod):
        return {"kind": "classmethod", "signature": signature(getattr(cls, name))}
    if inspect.isfunction(raw) or inspect.ismethoddescriptor(raw):
        sig = signature(raw)
        if sig and sig[0]["name"] in ("self", "cls"):
            sig = sig[1:]
        kind = "async method" if inspect.iscoroutinefunction(raw) else "method"
        return {"kind": kind, "signature": sig}
    if inspect.isclass(raw):
        return {"kind": "class"}
    return {"kind": "attribute"}


def fields_of(cls):
    # Instance attributes a program reads: dataclass fields and annotated class attributes.
    names = set()
    if dataclasses.is_dataclass(cls):
        names.update(f.name for f in dataclasses.fields(cls))
    for klass in cls.__mro__:
        names.update(getattr(klass, "__annotations__", {}) if isinstance(
            getattr(klass, "__annotations__", {}), dict) else {})
    for klass in cls.__mro__:
        slots = getattr(klass, "__slots__", ())
        names.update([slots] if isinstance(slots, str) else slots)
    return sorted(n for n in names if not n.startswith("_"))


def describe_class(cls):
    out = {"bases": sorted({k.__name__ for k in cls.__mro__[1:]
                            if not k.__name__.startswith("_") and k is not object})}
    if issubclass(cls, enum.Enum):
        out["kind"] = "enum"
        out["members"] = {m.name: text(m.value) for m in cls}
        return out
    out["kind"] = "exception" if issubclass(cls, BaseException) else "class"
    if cls.__module__.startswith("harnessx") or cls.__module__ == "__main__":
        out["signature"] = signature(cls)
    members = {}
    for name in dir(cls):
        if name.startswith("_"):
            continue
        # Only what harnessx defines: Exception's args, a NamedTuple's count ... are the same on both.
        owner = next((k for k in cls.__mro__ if name in k.__dict__), None)
        if owner is None or not (owner.__module__ or "").startswith("harnessx"):
            continue
        m = member(cls, name)
        if m is not None:
            members[name] = m
    out["members"] = members
    out["fields"] = fields_of(cls)
    return out


def origin(obj):
    if inspect.isclass(obj) or inspect.isroutine(obj):
        return f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"
    return None


def describe(obj):
    found = describe_kind(obj)
    found["origin"] = origin(obj)
    return found


def describe_kind(obj):
    if isinstance(obj, types.ModuleType):
        return {"kind": "module", "name": obj.__name__}
    if inspect.isclass(obj):
        return describe_class(obj)
    if inspect.isroutine(obj):
        kind = "async function" if inspect.iscoroutinefunction(obj) else "function"
        return {"kind": kind, "signature": signature(obj)}
    if isinstance(obj, enum.Enum):
        return {"kind": "enum member", "value": text(obj.value), "class": type(obj).__name__}
    kind = "constant"
    value = text(obj) if isinstance(obj, (str, int, float, bool, tuple, frozenset, type(None))) else None
    if isinstance(obj, (dict, list, set, frozenset, tuple)):
        value = text(sorted(map(str, obj))) if len(obj) <= 40 else f"<{len(obj)} items>"
    return {"kind": kind, "type": type(obj).__name__, "value": value}


def public_names(module):
    declared = getattr(module, "__all__", None)
    if declared is not None:
        return sorted(set(declared))
    names = []
    for name, obj in vars(module).items():
        if name.startswith("_") or isinstance(obj, types.ModuleType):
            continue
        if name in ("annotations", "TYPE_CHECKING", "logger", "log"):
            continue
        defined = inspect.isclass(obj) or inspect.isroutine(obj)
        origin = getattr(obj, "__module__", None) if defined else None
        if origin is not None and not origin.startswith("harnessx"):
            continue  # an import of the standard library or a dependency
        if isinstance(obj, (typing.TypeVar,)) or type(obj).__module__ == "typing":
            continue
        names.append(name)
    return sorted(names)


def unsupported_name(name):
    # A name of a feature not supported yet, wherever 0.9.1 had it: harnessx says so.
    import harnessx
    try:
        getattr(harnessx, name)
    except ImportError as exc:
        return "compatibility.md" in str(exc)
    except AttributeError:
        return False
    return False


def sweep(modules, with_names):
    out = {}
    for modname in modules:
        try:
            module = importlib.import_module(modname)
        except ImportError as exc:
            out[modname] = {"import_error": str(exc), "unsupported": "compatibility.md" in str(exc)}
            continue
        entry = {"names": {}}
        names = with_names.get(modname) if with_names else None
        entry["public"] = public_names(module)
        entry["has_all"] = getattr(module, "__all__", None) is not None
        for name in names if names is not None else entry["public"]:
            try:
                obj = getattr(module, name)
            except ImportError as exc:
                entry["names"][name] = {"missing": True, "unsupported": "compatibility.md" in str(exc)}
                continue
            except AttributeError:
                entry["names"][name] = {"missing": True, "unsupported": unsupported_name(name)}
                continue
            entry["names"][name] = describe(obj)
        out[modname] = entry
    return out


if sys.argv[1] == "list":
    print(json.dumps(list_modules()))
else:
    request = json.loads(sys.argv[1])
    print(json.dumps(sweep(request["modules"], request.get("names"))))
"""


def run(python: str, argument: str) -> Any:
    with tempfile.TemporaryDirectory(prefix="harnessx-sweep-") as scratch:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "PYTHON"))}
        done = subprocess.run(
            [python, "-c", INTROSPECT, argument],
            cwd=scratch,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    if done.returncode != 0:
        raise SystemExit(f"{python} failed:\n{done.stderr}")
    return json.loads(done.stdout)


def in_scope(module: str) -> bool:
    if module.startswith("harnessx.builtin"):
        return module in IN_SCOPE_BUILTIN
    return not any(module == m or module.startswith(m + ".") for m in OUT_OF_SCOPE_MODULES)


def compare_params(
    where: str, theirs: list[dict[str, Any]] | None, ours: list[dict[str, Any]] | None
) -> list[str]:
    """What a call written for the original could trip on (ours may add optional keywords)."""
    if theirs is None or ours is None:
        return [] if theirs is None else [f"{where}: no signature here"]
    if all(p["kind"] in ("VAR_POSITIONAL", "VAR_KEYWORD") for p in theirs):
        return []  # 0.9.1's is opaque (a wrapper): nothing to compare
    found: list[str] = []
    by_name = {p["name"]: p for p in ours}
    var_kw = any(p["kind"] == "VAR_KEYWORD" for p in ours)
    var_pos = any(p["kind"] == "VAR_POSITIONAL" for p in ours)
    positional = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")
    their_pos = [p["name"] for p in theirs if p["kind"] in positional]
    our_pos = [p["name"] for p in ours if p["kind"] in positional]
    for p in theirs:
        name = p["name"]
        mine = by_name.get(name)
        if mine is None:
            if (p["kind"] == "VAR_KEYWORD" and var_kw) or (p["kind"] == "VAR_POSITIONAL" and var_pos):
                continue
            if p["kind"] in ("VAR_KEYWORD", "VAR_POSITIONAL"):
                found.append(f"{where}: no {'**' if p['kind'] == 'VAR_KEYWORD' else '*'}{name}")
            elif not var_kw:
                found.append(f"{where}: no parameter {name!r}")
            elif p["kind"] != "KEYWORD_ONLY" and not var_pos:
                found.append(f"{where}: {name!r} only as a keyword (through **kwargs)")
            continue
        if p["kind"] != mine["kind"]:
            compatible = p["kind"] == "KEYWORD_ONLY" and mine["kind"] == "POSITIONAL_OR_KEYWORD"
            if not compatible:
                found.append(f"{where}: {name!r} is {mine['kind']} here, {p['kind']} in 0.9.1")
        if p["default"] != mine["default"] and not p["required"]:
            found.append(f"{where}: {name!r} defaults to {mine['default']} here, {p['default']} in 0.9.1")
    if our_pos[: len(their_pos)] != their_pos and all(n in by_name for n in their_pos):
        found.append(f"{where}: positional order {our_pos} here, {their_pos} in 0.9.1")
    theirs_names = {p["name"] for p in theirs}
    for p in ours:
        if (
            p["name"] not in theirs_names
            and p["required"]
            and p["kind"] not in ("VAR_KEYWORD", "VAR_POSITIONAL")
        ):
            found.append(f"{where}: {p['name']!r} is required here, unknown to 0.9.1")
    return found


def compare_name(name: str, theirs: dict[str, Any], ours: dict[str, Any]) -> list[str]:
    if ours.get("missing"):
        return [
            f"{name}: missing"
            + (" (unsupported, named by harnessx._unsupported)" if ours["unsupported"] else "")
        ]
    kind_t, kind_o = theirs["kind"], ours["kind"]
    # A function of 0.9.1's that is a class here (a factory) is called the same way.
    factory = kind_t == "function" and kind_o == "class"
    if kind_t != kind_o and {kind_t, kind_o} != {"function", "async function"} and not factory:
        return [f"{name}: a {kind_o} here, a {kind_t} in 0.9.1"]
    if kind_t != kind_o and "function" in kind_t and "function" in kind_o:
        return [f"{name}: a {kind_o} here, a {kind_t} in 0.9.1"]
    found: list[str] = []
    if kind_t in ("class", "exception", "enum"):
        for base in sorted(set(theirs["bases"]) - set(ours["bases"])):
            found.append(f"{name}: not a subclass of {base} here")
    if kind_t == "enum":
        for member, value in theirs["members"].items():
            if member not in ours["members"]:
                found.append(f"{name}.{member}: missing")
            elif ours["members"][member] != value:
                found.append(f"{name}.{member}: value {ours['members'][member]} here, {value} in 0.9.1")
        return found
    if kind_t in ("class", "exception"):
        if ours["kind"] in ("class", "exception"):
            found += compare_params(f"{name}(...)", theirs.get("signature"), ours.get("signature"))
            ours_members = ours["members"]
            for attr, info in sorted(theirs["members"].items()):
                mine = ours_members.get(attr)
                if mine is None:
                    if attr in ours["fields"] and info["kind"] in ("attribute", "property"):
                        continue
                    found.append(f"{name}.{attr}: missing ({info['kind']})")
                    continue
                if info["kind"] != mine["kind"]:
                    pair = {info["kind"], mine["kind"]}
                    if not (pair <= {"attribute", "property"} or pair <= {"method", "async method"}):
                        found.append(f"{name}.{attr}: a {mine['kind']} here, a {info['kind']} in 0.9.1")
                        continue
                    if pair <= {"method", "async method"}:
                        found.append(f"{name}.{attr}: a {mine['kind']} here, a {info['kind']} in 0.9.1")
                if "signature" in info:
                    found += compare_params(f"{name}.{attr}(...)", info["signature"], mine.get("signature"))
            for attr in theirs["fields"]:
                if attr not in ours["fields"] and attr not in ours_members:
                    found.append(f"{name}.{attr}: missing (field)")
        return found
    if "function" in kind_t:
        return compare_params(f"{name}(...)", theirs["signature"], ours["signature"])
    if kind_t == "constant" and theirs.get("value") != ours.get("value"):
        return [f"{name}: {ours.get('value')} here, {theirs.get('value')} in 0.9.1"]
    if kind_t == "enum member" and theirs["value"] != ours["value"]:
        return [f"{name}: value {ours['value']} here, {theirs['value']} in 0.9.1"]
    return found


def differences(
    modules: list[str], theirs: dict[str, Any], ours: dict[str, Any]
) -> tuple[dict[str, list[str]], int]:
    """Differences by module: each object compared where the original defines it (a name a
    module without ``__all__`` merely imports is checked for its presence only)."""
    report: dict[str, list[str]] = defaultdict(list)
    unsupported = 0
    compared: set[str] = set()
    entries = []
    for module in modules:
        t, o = theirs[module], ours[module]
        if "import_error" in t:
            continue  # the original cannot import it here either (an SDK it lacks)
        if "import_error" in o:
            report[module].append(f"cannot import: {o['import_error']}")
            continue
        for name in t["public"]:
            if name in OUT_OF_SCOPE_NAMES.get(module, set()):
                continue
            info = t["names"][name]
            origin = info.get("origin")
            home = origin is not None and origin.rsplit(".", 1)[0].split(".<")[0] == module
            defined = home or origin is None or t["has_all"]
            entries.append((0 if home else 1, module, name, defined))
    for _, module, name, defined in sorted(entries):
        info, mine = theirs[module]["names"][name], ours[module]["names"][name]
        if mine.get("missing") and mine.get("unsupported"):
            unsupported += 1
            continue
        if not defined:
            if mine.get("missing"):
                report[module].append(f"{name}: missing (0.9.1 imports it there from {info['origin']})")
            continue
        origin = info.get("origin")
        if origin is not None and not mine.get("missing"):
            if origin in compared:
                continue
            compared.add(origin)
        report[module] += compare_name(name, info, mine)
    return report, unsupported


def classify(module: str, line: str) -> str | None:
    """The status of a known difference (docs/compatibility.md), or None for an open one."""
    for (where, pattern), status in KNOWN.items():
        if (where == "*" or where == module) and re.search(pattern, line):
            return status
    return None


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--python", default=sys.executable, help="the interpreter with this harnessx")
    parser.add_argument(
        "--original-python", default=os.environ.get("HARNESSX_ORIGINAL_PYTHON", ORIGINAL_PYTHON)
    )
    parser.add_argument("--all", action="store_true", help="list the known differences too")
    parser.add_argument("--json", action="store_true", help="print the differences as JSON")
    args = parser.parse_args()

    modules = [m for m in run(args.original_python, "list") if in_scope(m)]
    theirs = run(args.original_python, json.dumps({"modules": modules}))
    names = {m: entry["public"] for m, entry in theirs.items() if "public" in entry}
    ours = run(args.python, json.dumps({"modules": modules, "names": names}))
    report, unsupported = differences(modules, theirs, ours)
    # A module the original cannot import in its venv (an SDK it lacks: providers.openai
    # needs ``openai``) is not compared at all; say so rather than count it as clean.
    unswept = {m: theirs[m]["import_error"] for m in modules if "import_error" in theirs[m]}

    open_: dict[str, list[str]] = defaultdict(list)
    known: dict[str, list[str]] = defaultdict(list)
    for module, lines in report.items():
        for line in lines:
            status = classify(module, line)
            if status is None:
                open_[module].append(line)
            else:
                known[status].append(f"{module}: {line}")
    if args.json:
        print(
            json.dumps(
                {
                    "modules": len(modules),
                    "open": open_,
                    "known": known,
                    "unsupported_names": unsupported,
                    "not_swept": unswept,
                }
            )
        )
        return
    for module, lines in open_.items():
        print(f"\n## {module} ({len(lines)})")
        for line in lines:
            print(f"- {line}")
    print("\n## Known differences (docs/compatibility.md)")
    for status, lines in known.items():
        print(f"- {status}: {len(lines)}")
        if args.all:
            for line in lines:
                print(f"    - {line}")
    total_known = sum(map(len, known.values()))
    total_open = sum(map(len, open_.values()))
    for module, error in unswept.items():
        print(f"\nNot swept: {module}, which the original cannot import here ({error})")
    print(
        f"\n{len(modules) - len(unswept)} modules swept: {total_open} open differences, {total_known} known; "
        f"{unsupported} names of features not yet supported left out"
    )


if __name__ == "__main__":
    main()
