"""The check on the arguments a model sends for a tool call, against the tool's JSON Schema.

``validate_arguments`` understands this subset of JSON Schema: boolean schemas, ``type``
(a name or a list of names), ``enum``, ``const``, ``properties``, ``required``,
``additionalProperties``, ``patternProperties``, ``items`` (a schema, or draft-07's list form
with ``additionalItems``), ``prefixItems``, ``minItems``, ``maxItems``, ``uniqueItems``,
``minLength``, ``maxLength``, ``pattern``, ``minimum``, ``maximum``, ``exclusiveMinimum``,
``exclusiveMaximum``, ``anyOf``, ``oneOf`` and ``allOf``. Patterns are run with Python's ``re``.
Every other keyword (``$ref``, ``format``, ``not``, ``if``/``then``/``else``, ...), every
keyword whose value is malformed and every pattern ``re`` rejects is ignored, so a
hand-written schema can make the check more lenient than intended but can never make it raise.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Callable
from typing import Any

__all__ = ["JsonSchema", "json_type_name", "validate_arguments"]

JsonSchema = dict[str, Any]


def validate_arguments(schema: JsonSchema, args: Any) -> list[str]:
    """Check ``args`` against ``schema``; return one readable message per problem, ``[]`` if valid.

    Messages name the offending argument by a slash-separated path from the top-level
    argument, e.g. ``argument 'points/2/x': expected number, got string "a"``. See the module
    docstring for the keywords understood; all others are ignored.
    """
    errors: list[str] = []
    _validate(schema, args, (), errors)
    return errors


_Path = tuple[str | int, ...]


def _is_number(value: Any) -> bool:
    # bool is a subclass of int in Python, but true/false are not numbers in JSON.
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_integer(value: Any) -> bool:
    # JSON Schema counts 2.0 as an integer; bind_arguments turns it into 2 for int parameters.
    return _is_number(value) and (isinstance(value, int) or float(value).is_integer())


_TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "null": lambda value: value is None,
    "boolean": lambda value: isinstance(value, bool),
    "integer": _is_integer,
    "number": _is_number,
    "string": lambda value: isinstance(value, str),
    "array": lambda value: isinstance(value, (list, tuple)),
    "object": lambda value: isinstance(value, dict),
}
_BOUNDS: tuple[tuple[str, Callable[[Any, Any], bool], str], ...] = (
    ("minimum", operator.ge, ">="),
    ("maximum", operator.le, "<="),
    ("exclusiveMinimum", operator.gt, ">"),
    ("exclusiveMaximum", operator.lt, "<"),
)


def _validate(schema: Any, value: Any, path: _Path, errors: list[str]) -> None:
    if schema is False:
        errors.append(f"{_where(path)}: no value is allowed here")
        return
    if not isinstance(schema, dict):  # True, or something that is not a schema at all
        return
    if not _check_type(schema, value, path, errors):
        return  # the keywords below would only repeat the type error in other words
    _check_enum_and_const(schema, value, path, errors)
    if isinstance(value, dict):
        _check_object(schema, value, path, errors)
    elif isinstance(value, (list, tuple)):
        _check_array(schema, value, path, errors)
    elif isinstance(value, str):
        _check_string(schema, value, path, errors)
    elif _is_number(value):
        _check_number(schema, value, path, errors)
    _check_combinators(schema, value, path, errors)


def _type_names(schema: Any) -> list[str]:
    """The known type names a schema allows; empty when it does not restrict the type."""
    if not isinstance(schema, dict):
        return []
    declared = schema.get("type")
    names = [declared] if isinstance(declared, str) else declared if isinstance(declared, list) else []
    return [name for name in names if isinstance(name, str) and name in _TYPE_CHECKS]


def _type_accepts(schema: Any, value: Any) -> bool:
    if schema is False:
        return False
    names = _type_names(schema)
    return not names or any(_TYPE_CHECKS[name](value) for name in names)


def _check_type(schema: JsonSchema, value: Any, path: _Path, errors: list[str]) -> bool:
    if _type_accepts(schema, value):
        return True
    errors.append(f"{_where(path)}: expected {' or '.join(_type_names(schema))}, got {_describe(value)}")
    return False


def _check_enum_and_const(schema: JsonSchema, value: Any, path: _Path, errors: list[str]) -> None:
    options = schema.get("enum")
    if isinstance(options, list) and not any(_json_equal(value, option) for option in options):
        allowed = ", ".join(_json(option) for option in options)
        errors.append(f"{_where(path)}: {_json(value)} is not one of {allowed}")
    if "const" in schema and not _json_equal(value, schema["const"]):
        errors.append(f"{_where(path)}: must be {_json(schema['const'])}, got {_json(value)}")


def _check_object(schema: JsonSchema, value: dict[Any, Any], path: _Path, errors: list[str]) -> None:
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    required = schema.get("required")
    if isinstance(required, list):
        for name in required:
            if isinstance(name, str) and name not in value:
                # JSON Schema's own wording (harnessx 0.9.1 passes its validator's on).
                errors.append(f"{name!r} is a required property" + (f" of {_where(path)}" if path else ""))
    additional = schema.get("additionalProperties", True)
    patterns = schema.get("patternProperties")
    for name, item in value.items():
        # Understood mainly so that additionalProperties does not reject the keys they cover.
        matching = _matching_pattern_schemas(patterns, name)
        for pattern_schema in matching:
            _validate(pattern_schema, item, (*path, name), errors)
        if name in properties:
            _validate(properties[name], item, (*path, name), errors)
        elif matching:
            continue
        elif additional is False:
            errors.append(f"unexpected argument {_render(path, name)!r}")
        else:
            _validate(additional, item, (*path, name), errors)


def _matching_pattern_schemas(patterns: Any, name: Any) -> list[Any]:
    if not isinstance(patterns, dict) or not isinstance(name, str):
        return []
    return [schema for pattern, schema in patterns.items() if _regex_matches(pattern, name)]


def _regex_matches(pattern: Any, text: str) -> bool | None:
    """``re.search`` as a bool; None when ``pattern`` is not a regular expression Python accepts.

    JSON Schema patterns are ECMA-262; the common subset reads the same in Python, and a
    pattern outside it is ignored rather than allowed to raise.
    """
    if not isinstance(pattern, str):
        return None
    try:
        return re.search(pattern, text) is not None
    except re.error:
        return None


def _check_array(
    schema: JsonSchema, value: list[Any] | tuple[Any, ...], path: _Path, errors: list[str]
) -> None:
    _check_size(schema, len(value), ("minItems", "maxItems", "item"), path, errors)
    if schema.get("uniqueItems") is True:
        _check_unique(value, path, errors)
    prefix = schema.get("prefixItems")
    rest = schema.get("items")
    if isinstance(rest, list):  # draft-07 spelling of prefixItems
        prefix, rest = rest, schema.get("additionalItems")
    start = 0
    if isinstance(prefix, list):
        for index, (item_schema, item) in enumerate(zip(prefix, value, strict=False)):
            _validate(item_schema, item, (*path, index), errors)
        start = len(prefix)
    if rest is not None:
        for index in range(start, len(value)):
            _validate(rest, value[index], (*path, index), errors)


def _check_unique(value: list[Any] | tuple[Any, ...], path: _Path, errors: list[str]) -> None:
    for index, item in enumerate(value):
        if any(_json_equal(item, earlier) for earlier in value[:index]):
            errors.append(f"{_where(path)}: items must be unique, but {_json(item)} appears more than once")
            return


def _check_string(schema: JsonSchema, value: str, path: _Path, errors: list[str]) -> None:
    _check_size(schema, len(value), ("minLength", "maxLength", "character"), path, errors)
    pattern = schema.get("pattern")
    if _regex_matches(pattern, value) is False:
        errors.append(f"{_where(path)}: {_json(value)} does not match the pattern {_json(pattern)}")


def _check_size(
    schema: JsonSchema, size: int, keywords: tuple[str, str, str], path: _Path, errors: list[str]
) -> None:
    low_keyword, high_keyword, unit = keywords
    low: Any = schema.get(low_keyword)
    high: Any = schema.get(high_keyword)
    if _is_number(low) and size < low:
        errors.append(f"{_where(path)}: expected at least {_count(low, unit)}, got {size}")
    if _is_number(high) and size > high:
        errors.append(f"{_where(path)}: expected at most {_count(high, unit)}, got {size}")


def _check_number(schema: JsonSchema, value: float, path: _Path, errors: list[str]) -> None:
    for keyword, within, symbol in _BOUNDS:
        limit = schema.get(keyword)
        if _is_number(limit) and not within(value, limit):
            errors.append(f"{_where(path)}: must be {symbol} {_json(limit)}, got {_json(value)}")


def _check_combinators(schema: JsonSchema, value: Any, path: _Path, errors: list[str]) -> None:
    all_of = schema.get("allOf")
    if isinstance(all_of, list):
        for branch in all_of:
            _validate(branch, value, path, errors)
    for keyword in ("anyOf", "oneOf"):
        branches = schema.get(keyword)
        if not isinstance(branches, list) or not branches:
            continue
        outcomes = [_branch_errors(branch, value, path) for branch in branches]
        matches = sum(1 for outcome in outcomes if not outcome)
        if matches == 0:
            errors.extend(_no_alternative_matches(branches, outcomes, value, path))
        elif keyword == "oneOf" and matches > 1:
            errors.append(
                f"{_where(path)}: matches {matches} of the alternatives, but must match exactly one"
            )


def _branch_errors(branch: Any, value: Any, path: _Path) -> list[str]:
    errors: list[str] = []
    _validate(branch, value, path, errors)
    return errors


def _no_alternative_matches(
    branches: list[Any], outcomes: list[list[str]], value: Any, path: _Path
) -> list[str]:
    # When only one alternative takes a value of this type (an object where the choice is
    # "object or null", say), its own complaints tell the model precisely what to fix.
    plausible = [
        outcome for branch, outcome in zip(branches, outcomes, strict=True) if _type_accepts(branch, value)
    ]
    if len(plausible) == 1:
        return plausible[0]
    summaries = list(dict.fromkeys(_summarise(branch) for branch in branches))
    return [f"{_where(path)}: expected {' or '.join(summaries)}, got {_describe(value)}"]


def _summarise(schema: Any) -> str:
    if isinstance(schema, dict):
        if isinstance(schema.get("enum"), list):
            return "one of " + ", ".join(_json(option) for option in schema["enum"])
        if "const" in schema:
            return _json(schema["const"])
        if _type_names(schema):
            return " or ".join(_type_names(schema))
    return "a value matching another alternative"


def _json_equal(left: Any, right: Any) -> bool:
    """Equality as JSON sees it: ``true`` is not ``1``, but ``1`` is ``1.0``."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if _is_number(left) and _is_number(right):
        return bool(left == right)
    if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
        return len(left) == len(right) and all(map(_json_equal, left, right))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_json_equal(left[key], right[key]) for key in left)
    if _is_number(left) or _is_number(right):
        return False
    return bool(left == right)


def _render(path: _Path, *more: str | int) -> str:
    return "/".join(str(part) for part in (*path, *more))


def _where(path: _Path) -> str:
    return f"argument {_render(path)!r}" if path else "arguments"


def _count(number: float, unit: str) -> str:
    return f"{_json(number)} {unit}" + ("" if number == 1 else "s")


def json_type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _describe(value: Any) -> str:
    kind = json_type_name(value)
    return kind if value is None else f"{kind} {_json(value)}"


_MAX_SHOWN = 80  # long values are cut so that one bad argument cannot flood the model's context


def _json(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):  # keys JSON cannot express, or a reference cycle
        text = repr(value)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."
