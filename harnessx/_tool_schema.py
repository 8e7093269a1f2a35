"""Tool functions as JSON Schema, and the JSON arguments a model sends bound back to Python.

The engine uses three functions in this order (``validate_arguments`` is in
``harnessx._validation``, which this module uses to check defaults and pick union members):

- ``function_schema(fn)`` describes a Python function to the model: a description taken from
  the docstring summary and an ``input_schema`` built from the signature and the type hints.
- ``validate_arguments(schema, args)`` checks the JSON arguments the model sent and returns
  readable error strings, which go back to the model so that it can correct its call.
- ``bind_arguments(fn, args)`` turns validated JSON arguments into the keyword arguments ``fn``
  expects: Enum members, dataclass instances, tuples and sets instead of plain JSON values.

Annotations understood by ``function_schema``: ``str``, ``int``, ``float``, ``bool``, ``None``,
``Any`` / no annotation, ``list`` / ``Sequence`` / ``tuple`` / ``set`` / ``frozenset``, ``dict`` /
``Mapping`` with ``str`` keys, unions and ``Optional``, ``Literal``, ``Enum`` subclasses,
``TypedDict``, dataclasses (nested to any depth, but not recursive), ``NewType`` and
``Annotated[X, "description"]``. Anything else raises ``ConfigurationError``; such tools need
an explicit schema.

Descriptions come from Google-style docstrings: the text before the first section header is
the tool's description, and entries of the ``Args:`` section (``name: text`` or
``name (type): text``, continuation lines indented further) describe the parameters. For
dataclasses and TypedDicts the class docstring's ``Attributes:`` (or ``Args:``) section
describes the fields. A string in ``Annotated`` takes precedence over the docstring entry.
"""

from __future__ import annotations

import collections.abc
import copy
import dataclasses
import functools
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Collection
from enum import Enum
from typing import Annotated, Any, Literal, NotRequired, Required, Union, get_args, get_origin

from harnessx._errors import ConfigurationError
from harnessx._validation import JsonSchema, json_type_name, validate_arguments

__all__ = ["bind_arguments", "copy_schema", "function_schema"]

# The schema of every tool is needed for every model request; resolving string annotations and
# parsing docstrings each time would be wasted work. The bound keeps tools created on the fly
# (closures, lambdas) from growing the caches without limit.
_CACHE_SIZE = 1024


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def function_schema(fn: Callable[..., Any], *, skip: Collection[str] = ()) -> tuple[str, JsonSchema]:
    """Return ``(description, input_schema)`` describing ``fn`` to a model.

    ``skip`` names parameters the caller fills in itself (a context object, say); they are
    left out of the schema. ``self``/``cls`` as the first parameter, ``*args`` and ``**kwargs``
    are always left out. Raises ``ConfigurationError`` when a parameter's annotation has no
    JSON Schema equivalent, when the annotations cannot be resolved, or when a parameter is
    positional-only (arguments are always passed by keyword).
    """
    description, schema = _function_schemas.get(fn, frozenset(skip))
    # Callers may add to the schema they get back; the cached copy must stay as built.
    return description, copy_schema(schema)


def copy_schema(value: Any) -> Any:
    """A deep copy of a JSON Schema: its dicts and lists copied, JSON's scalars shared (they
    are immutable), anything else by ``copy.deepcopy``. Every agent built copies its tools'
    schemas, and every model request their specs: this is several times quicker than
    ``copy.deepcopy`` on the same data, which keeps a memo of every object it visits."""
    kind = type(value)
    # Exact types first, and scalars without a call: most of a schema is small dicts of strings.
    if kind is dict:
        return {k: item if type(item) in _JSON_SCALARS else copy_schema(item) for k, item in value.items()}
    if kind is list:
        return [item if type(item) in _JSON_SCALARS else copy_schema(item) for item in value]
    if kind in _JSON_SCALARS:
        return value
    if isinstance(value, dict):
        return {key: copy_schema(item) for key, item in value.items()}
    if isinstance(value, list):
        return [copy_schema(item) for item in value]
    if isinstance(value, str | int | float):  # subclasses (bool is an int)
        return value
    return copy.deepcopy(value)


_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})


def bind_arguments(
    fn: Callable[..., Any], args: dict[str, Any], *, skip: Collection[str] = ()
) -> dict[str, Any]:
    """Turn JSON arguments (already checked by ``validate_arguments``) into keyword arguments for ``fn``.

    Enum parameters receive the member, dataclass parameters an instance (built recursively),
    TypedDict, list, dict and union values have their contents converted the same way, tuples
    and sets are built from lists, and an integral float for an ``int`` parameter becomes an
    ``int``. Everything else is passed through unchanged. Keys that match no parameter are
    dropped unless ``fn`` takes ``**kwargs``; keys in ``skip`` (the caller's own parameters)
    are always dropped so that a model can never supply them. Invalid values are not reported
    here: an Enum value that is not a member raises ``ValueError``.
    """
    info = _function_info(fn)
    fields = {field.name: field for field in info.fields}
    kwargs: dict[str, Any] = {}
    for name, value in args.items():
        if name in skip:
            continue
        field = fields.get(name)
        if field is None:
            if info.var_keyword:
                kwargs[name] = value
        elif not field.positional_only:
            kwargs[name] = _convert(field.annotation, value)
    return kwargs


# ---------------------------------------------------------------------------------------------
# Reading a function: signature, resolved annotations, docstring
# ---------------------------------------------------------------------------------------------


class _NoDefault:
    """Marks a parameter or field without a default (``None`` is a legitimate default)."""


_NO_DEFAULT = _NoDefault()


@dataclasses.dataclass(frozen=True)
class _Field:
    """A function parameter, dataclass field or TypedDict key, as far as the schema is concerned."""

    name: str
    annotation: Any
    required: bool
    default: Any = _NO_DEFAULT
    positional_only: bool = False


@dataclasses.dataclass(frozen=True)
class _Docstring:
    summary: str
    params: dict[str, str]


@dataclasses.dataclass(frozen=True)
class _FunctionInfo:
    name: str
    fields: tuple[_Field, ...]  # without self/cls, *args and **kwargs
    var_keyword: bool  # fn takes **kwargs
    doc: _Docstring


def _is_hashable(obj: object) -> bool:
    try:
        hash(obj)
    except TypeError:
        return False
    return True


# Defaults that compare as values for the caches' keys: their type is part of the key (True
# and 1 are equal, and hash alike, but are different defaults).
_PLAIN_DEFAULTS = (type(None), bool, int, float, str)


def _cache_key(fn: Callable[..., Any]) -> Any:
    """What the caches below know ``fn`` by, or ``None`` (not cached).

    A plain function is known by what it is made of (code, names, docstring, module globals,
    defaults, annotations), not by identity: an agent factory defines its tools' handlers
    afresh for every agent it builds (closures), and each of those would otherwise have its
    signature read, its annotations resolved and its docstring parsed again, for every run a
    worker starts. Two functions with equal keys have the same signature, hints and docstring;
    closure cells are not part of any of those. Attributes a function was given are part of
    its key when they are plain values (a marker such as the built-in tools'); a function with
    others (``__wrapped__``, ``__signature__``...) or defaults that are not plain values is
    known by identity, as any other hashable callable is."""
    if type(fn) is not types.FunctionType:
        return fn if _is_hashable(fn) else None
    defaults = fn.__defaults__ or ()
    kwdefaults = tuple((fn.__kwdefaults__ or {}).items())
    attributes = tuple(sorted(fn.__dict__.items()))
    plain = (*defaults, *(v for _, v in kwdefaults), *(v for _, v in attributes))
    if not all(type(value) in _PLAIN_DEFAULTS for value in plain):
        return fn
    key = (
        fn.__code__,
        fn.__name__,
        fn.__qualname__,
        fn.__module__,
        fn.__doc__,
        id(fn.__globals__),
        tuple((type(value), value) for value in defaults),
        tuple((name, type(value), value) for name, value in kwdefaults),
        tuple(fn.__annotations__.items()),
        tuple((name, type(value), value) for name, value in attributes),
    )
    return key if _is_hashable(key) else fn


class _KeyedCache:
    """A bounded cache by ``_cache_key``; ``build`` makes what is missing. A key made of a
    function's parts names its globals by id: the cached entry keeps those globals alive, so
    the id cannot be reused while the entry exists."""

    def __init__(self, build: Callable[..., Any]) -> None:
        self._build = build
        self._entries: dict[Any, tuple[Any, Any]] = {}

    def get(self, fn: Callable[..., Any], *args: Any) -> Any:
        key = _cache_key(fn)
        if key is None:
            return self._build(fn, *args)
        key = (key, *args)
        found = self._entries.get(key)
        if found is None:
            if len(self._entries) >= _CACHE_SIZE:
                self._entries.pop(next(iter(self._entries)))  # the oldest
            found = self._entries[key] = (self._build(fn, *args), getattr(fn, "__globals__", None))
        return found[0]

    def clear(self) -> None:
        self._entries.clear()


def _function_info(fn: Callable[..., Any]) -> _FunctionInfo:
    info: _FunctionInfo = _function_infos.get(fn)
    return info


def _load_function_info(fn: Callable[..., Any]) -> _FunctionInfo:
    name = _callable_name(fn)
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"cannot read the signature of tool function {name!r}: {exc}") from exc
    hint_source, doc_source = _introspection_targets(fn)
    try:
        hints = typing.get_type_hints(hint_source, include_extras=True)
    except Exception as exc:  # evaluating an annotation string can raise anything; NameError is typical
        raise ConfigurationError(
            f"cannot resolve the type annotations of tool function {name!r} "
            f"({type(exc).__name__}: {exc}); annotations are evaluated when the schema is built, so "
            "the names they use must be importable at module level, not only under TYPE_CHECKING"
        ) from exc
    fields: list[_Field] = []
    var_keyword = False
    for index, param in enumerate(signature.parameters.values()):
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            var_keyword = True
        elif param.kind is inspect.Parameter.VAR_POSITIONAL:
            continue
        elif not (index == 0 and param.name in ("self", "cls")):
            fields.append(_parameter_field(param, hints))
    return _FunctionInfo(name, tuple(fields), var_keyword, _parse_docstring(_own_doc(doc_source)))


def _parameter_field(param: inspect.Parameter, hints: dict[str, Any]) -> _Field:
    has_default = param.default is not inspect.Parameter.empty
    return _Field(
        name=param.name,
        annotation=hints.get(param.name, Any),
        required=not has_default,
        default=param.default if has_default else _NO_DEFAULT,
        positional_only=param.kind is inspect.Parameter.POSITIONAL_ONLY,
    )


def _callable_name(fn: object) -> str:
    return str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn))


def _introspection_targets(fn: Any) -> tuple[Any, Any]:
    """Return (object holding fn's parameter annotations, object holding its docstring).

    ``inspect.signature`` sees through partials, classes and callable instances by itself, but
    ``get_type_hints`` would read the wrong annotations (a class's attributes, or none at all).
    """
    while isinstance(fn, functools.partial):
        fn = fn.func
    if isinstance(fn, type):
        return typing.cast(Any, fn).__init__, fn
    if inspect.isroutine(fn):
        return fn, fn
    call = type(fn).__call__
    return call, (call if getattr(call, "__doc__", None) else type(fn))


def _own_doc(obj: Any) -> str | None:
    """The docstring written for ``obj`` itself: never one inherited or invented for it."""
    if not isinstance(obj, type):
        doc = getattr(obj, "__doc__", None)
        return doc if isinstance(doc, str) else None
    # inspect.getdoc would fall back to a base class (a TypedDict would get dict's docstring).
    doc = obj.__dict__.get("__doc__")
    if not isinstance(doc, str):
        return None
    # @dataclass writes "Name(field: type, ...)" into classes without a docstring.
    if dataclasses.is_dataclass(obj) and doc.startswith(f"{obj.__name__}("):
        return None
    return doc


# ---------------------------------------------------------------------------------------------
# Google-style docstrings
# ---------------------------------------------------------------------------------------------

_SECTION_HEADER = re.compile(
    r"^\s*(?P<name>args|arguments|parameters|params|keyword args|keyword arguments|other parameters"
    r"|attributes|returns?|yields?|raises|examples?|notes?|warnings?|see also|references|todo)\s*:\s*$",
    re.IGNORECASE,
)
# "attributes" is where dataclasses and TypedDicts conventionally describe their fields.
_PARAMETER_SECTIONS = frozenset(
    {
        "args",
        "arguments",
        "parameters",
        "params",
        "keyword args",
        "keyword arguments",
        "other parameters",
        "attributes",
    }
)
# "name: text" or "name (type): text"; the lazy group stops at the first "):" so that
# parentheses in the text are left alone, while nested ones in the type still match.
_ENTRY = re.compile(r"^\*{0,2}(?P<name>[A-Za-z_]\w*)\s*(?:\(.*?\))?\s*:(?P<text>.*)$")


def _parse_docstring(doc: str | None) -> _Docstring:
    if not doc:
        return _Docstring("", {})
    lines = inspect.cleandoc(doc).splitlines()
    headers = [(index, match) for index, line in enumerate(lines) if (match := _SECTION_HEADER.match(line))]
    summary_end = headers[0][0] if headers else len(lines)
    params: dict[str, str] = {}
    for index, match in headers:
        if match.group("name").lower() in _PARAMETER_SECTIONS:
            params.update(_parse_entries(_section_body(lines, index)))
    return _Docstring(_normalise(" ".join(lines[:summary_end])), params)


def _section_body(lines: list[str], header: int) -> list[str]:
    """The lines under ``lines[header]``: up to the next line indented no deeper than the header."""
    header_indent = _indent(lines[header])
    body: list[str] = []
    for line in lines[header + 1 :]:
        if line.strip() and _indent(line) <= header_indent:
            break
        body.append(line)
    return body


def _parse_entries(body: list[str]) -> dict[str, str]:
    entries: dict[str, list[str]] = {}
    entry_indent: int | None = None
    current: str | None = None
    for line in body:
        if not line.strip():
            continue
        indent = _indent(line)
        if entry_indent is None:
            entry_indent = indent
        if indent <= entry_indent:
            # A line at entry depth that is not "name: text" ends the entry without starting one.
            match = _ENTRY.match(line.strip())
            current = match.group("name") if match else None
            if match:
                entries[match.group("name")] = [match.group("text")]
        elif current is not None:
            entries[current].append(line)
    return {name: _normalise(" ".join(parts)) for name, parts in entries.items()}


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _normalise(text: str) -> str:
    return " ".join(text.split())


# ---------------------------------------------------------------------------------------------
# Annotations to JSON Schema
# ---------------------------------------------------------------------------------------------


class _Unsupported(Exception):
    """An annotation without a JSON Schema equivalent.

    Raised deep inside the recursion, where the function and parameter are unknown; the
    caller that knows them turns it into a ``ConfigurationError``.
    """

    def __init__(self, annotation: Any, reason: str = "") -> None:
        super().__init__(annotation, reason)
        self.annotation = annotation
        self.reason = reason


_PRIMITIVES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_SEQUENCES = frozenset(
    {
        list,
        collections.abc.Sequence,
        collections.abc.MutableSequence,
        collections.abc.Collection,
        collections.abc.Iterable,
    }
)
_SETS = frozenset({set, frozenset, collections.abc.Set, collections.abc.MutableSet})
_MAPPINGS = frozenset({dict, collections.abc.Mapping, collections.abc.MutableMapping})
_UNIONS = (Union, types.UnionType)
_NONE_TYPE = type(None)
# A nullable variant of these cannot be made by adding "null" to "type": the keyword would
# still reject null (an enum without None, say), so they get an anyOf instead.
_NULL_REJECTING_KEYWORDS = frozenset({"enum", "const", "anyOf", "oneOf", "allOf"})


def _build_function_schema(fn: Callable[..., Any], skip: frozenset[str]) -> tuple[str, JsonSchema]:
    info = _function_info(fn)
    properties: dict[str, JsonSchema] = {}
    required: list[str] = []
    for field in info.fields:
        if field.name in skip:
            continue
        if field.positional_only:
            raise ConfigurationError(
                f"tool function {info.name!r}: parameter {field.name!r} is positional-only, but tool "
                "arguments are passed by keyword; remove the '/' from the signature or add the "
                "parameter to skip"
            )
        try:
            properties[field.name] = _field_schema(field, info.doc.params.get(field.name), ())
        except _Unsupported as exc:
            raise ConfigurationError(_unsupported_message(info.name, field, exc)) from None
        if field.required:
            required.append(field.name)
    schema = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    return info.doc.summary, schema


def _unsupported_message(function: str, field: _Field, exc: _Unsupported) -> str:
    inside = "" if exc.annotation is field.annotation else f" (in {_type_repr(field.annotation)})"
    reason = f": {exc.reason}" if exc.reason else ""
    return (
        f"tool function {function!r}, parameter {field.name!r}: type {_type_repr(exc.annotation)}{inside} "
        f"cannot be described as JSON Schema{reason}. Use str, int, float, bool, None, list/tuple/set/dict "
        "of those, Optional or a union, Literal, an Enum, a TypedDict or a dataclass (with "
        "Annotated[..., 'description'] for descriptions), or register the tool with an explicit "
        "schema through register_with_schema"
    )


def _type_repr(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__qualname__ if tp.__module__ == "builtins" else f"{tp.__module__}.{tp.__qualname__}"
    return repr(tp)


def _field_schema(field: _Field, doc: str | None, seen: tuple[type, ...]) -> JsonSchema:
    schema = _type_schema(field.annotation, seen)
    if doc and not _has_annotated_description(field.annotation):
        schema = {**schema, "description": doc}
    if field.default is not _NO_DEFAULT:
        default = _json_default(field.default, schema)
        if default is not _NO_DEFAULT:
            schema = {**schema, "default": default}
    return schema


def _has_annotated_description(tp: Any) -> bool:
    if get_origin(tp) in (Required, NotRequired):
        tp = get_args(tp)[0]
    return get_origin(tp) is Annotated and any(isinstance(meta, str) for meta in tp.__metadata__)


def _json_default(value: Any, schema: JsonSchema) -> Any:
    """``value`` as JSON if it is expressible and allowed by ``schema``, else ``_NO_DEFAULT``."""
    if isinstance(value, Enum):
        value = value.value
    try:
        encoded = json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        return _NO_DEFAULT
    # A default the schema itself rejects (``x: int = None``) would only confuse the model.
    return _NO_DEFAULT if validate_arguments(schema, encoded) else encoded


def _type_schema(tp: Any, seen: tuple[type, ...] = ()) -> JsonSchema:
    """The schema for one annotation. ``seen`` holds the records being expanded, to stop recursion."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _annotated_schema(tp, seen)
    if origin is Required or origin is NotRequired:
        return _type_schema(get_args(tp)[0], seen)
    if tp is Any or tp is object:
        return {}
    if tp is None or tp is _NONE_TYPE:
        return {"type": "null"}
    if isinstance(tp, typing.NewType):
        return _type_schema(tp.__supertype__, seen)
    if origin in _UNIONS:
        return _union_schema(get_args(tp), seen)
    if origin is Literal:
        return _literal_schema(tp)
    if isinstance(tp, type) and origin is None:
        return _class_schema(tp, seen)
    return _generic_schema(tp, origin, get_args(tp), seen)


def _annotated_schema(tp: Any, seen: tuple[type, ...]) -> JsonSchema:
    inner, *metadata = get_args(tp)
    schema = _type_schema(inner, seen)
    # Only strings mean something here; other metadata belongs to other libraries.
    description = next((meta for meta in metadata if isinstance(meta, str)), None)
    return schema if description is None else {**schema, "description": _normalise(description)}


def _union_schema(members: tuple[Any, ...], seen: tuple[type, ...]) -> JsonSchema:
    nullable = _NONE_TYPE in members
    schemas = [_type_schema(member, seen) for member in members if member is not _NONE_TYPE]
    if {} in schemas:  # Any absorbs every other member
        return {}
    if nullable and len(schemas) == 1:
        return _nullable(schemas[0])
    if nullable:
        schemas.append({"type": "null"})
    return {"anyOf": schemas}


def _nullable(schema: JsonSchema) -> JsonSchema:
    kind = schema.get("type")
    if isinstance(kind, str) and not _NULL_REJECTING_KEYWORDS.intersection(schema):
        return {**schema, "type": [kind, "null"]}
    return {"anyOf": [schema, {"type": "null"}]}


def _literal_schema(tp: Any) -> JsonSchema:
    values = list(get_args(tp))
    for value in values:
        if isinstance(value, Enum) or not (value is None or isinstance(value, (str, int))):
            raise _Unsupported(
                tp, "Literal values must be str, int, bool or None (use the Enum class itself)"
            )
    return _enum_values_schema(values)


def _enum_schema(cls: type[Enum]) -> JsonSchema:
    values = [member.value for member in cls]
    for value in values:
        if not (value is None or isinstance(value, (str, int, float))):
            raise _Unsupported(cls, f"member value {value!r} is not a JSON string, number, boolean or null")
    return _enum_values_schema(values)


def _enum_values_schema(values: list[Any]) -> JsonSchema:
    kinds = {json_type_name(value) for value in values}
    if kinds == {"integer", "number"}:
        kinds = {"number"}
    # A "type" beside "enum" is redundant for validation but helps models that read types first.
    return {"type": kinds.pop(), "enum": values} if len(kinds) == 1 else {"enum": values}


def _class_schema(cls: type, seen: tuple[type, ...]) -> JsonSchema:
    if issubclass(cls, Enum):
        return _enum_schema(cls)
    if cls in _PRIMITIVES:
        return {"type": _PRIMITIVES[cls]}
    if typing.is_typeddict(cls) or dataclasses.is_dataclass(cls):
        return _record_schema(cls, seen)
    return _generic_schema(cls, cls, None, seen)


def _generic_schema(tp: Any, base: Any, args: tuple[Any, ...] | None, seen: tuple[type, ...]) -> JsonSchema:
    """Containers; ``args`` is None for a bare class such as ``list`` (as opposed to ``tuple[()]``)."""
    if base in _SEQUENCES:
        return _array_schema(args, seen)
    if base in _SETS:
        return {**_array_schema(args, seen), "uniqueItems": True}
    if base is tuple:
        return _tuple_schema(args, seen)
    if base in _MAPPINGS:
        return _mapping_schema(args, seen)
    raise _Unsupported(tp)


def _array_schema(args: tuple[Any, ...] | None, seen: tuple[type, ...]) -> JsonSchema:
    if not args:
        return {"type": "array"}
    return {"type": "array", "items": _type_schema(args[0], seen)}


def _tuple_schema(args: tuple[Any, ...] | None, seen: tuple[type, ...]) -> JsonSchema:
    if args is None:
        return {"type": "array"}
    if len(args) == 2 and args[1] is Ellipsis:
        return _array_schema(args[:1], seen)
    # A fixed-length tuple: one schema per position, and exactly that many items.
    prefix = [_type_schema(arg, seen) for arg in args]
    return {"type": "array", "prefixItems": prefix, "minItems": len(args), "maxItems": len(args)}


def _mapping_schema(args: tuple[Any, ...] | None, seen: tuple[type, ...]) -> JsonSchema:
    if not args:
        return {"type": "object"}
    key, value = args
    if key is not str and key is not Any:
        raise _Unsupported(key, "JSON object keys are always strings, so dict keys must be str")
    return {"type": "object", "additionalProperties": _type_schema(value, seen)}


def _record_schema(cls: type, seen: tuple[type, ...]) -> JsonSchema:
    """A dataclass or TypedDict: a closed object whose properties are its fields."""
    if cls in seen:
        raise _Unsupported(cls, "recursive types are not supported")
    doc = _parse_docstring(_own_doc(cls))
    properties: dict[str, JsonSchema] = {}
    required: list[str] = []
    for field in _record_fields(cls):
        properties[field.name] = _field_schema(field, doc.params.get(field.name), (*seen, cls))
        if field.required:
            required.append(field.name)
    schema: JsonSchema = {"type": "object"}
    if doc.summary:
        schema["description"] = doc.summary
    schema.update(properties=properties, required=required, additionalProperties=False)
    return schema


def _record_fields(cls: Any) -> list[_Field]:
    try:
        hints = _class_hints(cls)
    except Exception as exc:  # evaluating an annotation string can raise anything
        raise _Unsupported(cls, f"its annotations cannot be resolved ({type(exc).__name__}: {exc})") from exc
    if typing.is_typeddict(cls):
        required_keys = _typeddict_required_keys(cls, hints)
        return [_Field(name, hint, name in required_keys) for name, hint in hints.items()]
    fields: list[_Field] = []
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        has_factory = field.default_factory is not dataclasses.MISSING
        default = _NO_DEFAULT if field.default is dataclasses.MISSING else field.default
        required = default is _NO_DEFAULT and not has_factory
        fields.append(_Field(field.name, hints.get(field.name, Any), required, default))
    return fields


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _class_hints(cls: Any) -> dict[str, Any]:
    """Resolved annotations of a dataclass or TypedDict; never mutate the returned dict."""
    return typing.get_type_hints(cls, include_extras=True)


def _typeddict_required_keys(cls: Any, hints: dict[str, Any]) -> set[str]:
    # Python 3.11 only notices Required/NotRequired when the class is created, and string
    # annotations (from __future__ import annotations) hide them then, so __required_keys__
    # reflects totality alone; the resolved hints still carry the markers.
    required = set(cls.__required_keys__)
    for name, hint in hints.items():
        origin = get_origin(get_args(hint)[0] if get_origin(hint) is Annotated else hint)
        if origin is Required:
            required.add(name)
        elif origin is NotRequired:
            required.discard(name)
    return required


# ---------------------------------------------------------------------------------------------
# Binding JSON values to Python parameters
# ---------------------------------------------------------------------------------------------


def _convert(tp: Any, value: Any) -> Any:
    tp = _strip_wrappers(tp)
    origin = get_origin(tp)
    if origin in _UNIONS:
        return _convert_union(get_args(tp), value)
    if isinstance(tp, type) and origin is None:
        return _convert_to_class(tp, value)
    if origin is not None:
        return _convert_container(origin, get_args(tp), value)
    return value


def _strip_wrappers(tp: Any) -> Any:
    """Peel off what does not change the runtime type: Annotated, Required, NewType."""
    while True:
        if get_origin(tp) in (Annotated, Required, NotRequired):
            tp = get_args(tp)[0]
        elif isinstance(tp, typing.NewType):
            tp = tp.__supertype__
        else:
            return tp


def _convert_union(members: tuple[Any, ...], value: Any) -> Any:
    if value is None and _NONE_TYPE in members:
        return None
    # The first member whose schema accepts the value decides the conversion, so that
    # ``Unit | None`` yields a Unit and ``Point | str`` yields a Point for an object.
    for member in members:
        if member is _NONE_TYPE:
            continue
        try:
            schema = _type_schema(member)
        except _Unsupported:
            continue
        if not validate_arguments(schema, value):
            return _convert(member, value)
    return value


def _convert_to_class(cls: Any, value: Any) -> Any:
    if issubclass(cls, Enum):
        return value if isinstance(value, cls) else cls(value)
    if cls is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        if dataclasses.is_dataclass(cls):
            return _build_dataclass(cls, value)
        if typing.is_typeddict(cls):
            hints = _binding_hints(cls)
            return {key: _convert(hints.get(key, Any), item) for key, item in value.items()}
    return _convert_container(cls, (), value)


def _binding_hints(cls: Any) -> dict[str, Any]:
    # A tool registered with a hand-written schema may use records function_schema could not
    # resolve; their values are then passed on unconverted rather than failing here.
    try:
        return _class_hints(cls)
    except Exception:  # evaluating an annotation string can raise anything
        return {}


def _build_dataclass(cls: Any, value: dict[str, Any]) -> Any:
    hints = _binding_hints(cls)
    kwargs = {
        field.name: _convert(hints.get(field.name, Any), value[field.name])
        for field in dataclasses.fields(cls)
        if field.init and field.name in value
    }
    return cls(**kwargs)


def _convert_container(base: Any, args: tuple[Any, ...], value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        if base is tuple:
            return tuple(_convert_tuple_items(args, value))
        items = [_convert(args[0], item) for item in value] if args else list(value)
        if base in _SETS:
            return frozenset(items) if base is frozenset else set(items)
        if base in _SEQUENCES:
            return items
    if isinstance(value, dict) and base in _MAPPINGS and len(args) == 2:
        return {key: _convert(args[1], item) for key, item in value.items()}
    return value


def _convert_tuple_items(args: tuple[Any, ...], value: list[Any] | tuple[Any, ...]) -> list[Any]:
    if len(args) == 2 and args[1] is Ellipsis:
        return [_convert(args[0], item) for item in value]
    if not args:  # bare ``tuple``
        return list(value)
    return [_convert(arg, item) for arg, item in zip(args, value, strict=False)]


_function_infos = _KeyedCache(_load_function_info)
_function_schemas = _KeyedCache(_build_function_schema)
