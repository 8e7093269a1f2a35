"""Tests for harnessx._tool_schema: tool signatures to JSON Schema, argument checks, argument binding."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import functools
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Literal, NewType, NotRequired, Optional, Required, TypedDict

import pytest

from harnessx._errors import ConfigurationError
from harnessx._tool_schema import bind_arguments, function_schema
from harnessx._validation import validate_arguments

# ---------------------------------------------------------------------------------------------
# Types used by the tool functions below. They live at module level because the annotations
# are strings (from __future__ import annotations) resolved against the module's globals.
# ---------------------------------------------------------------------------------------------


class Unit(enum.Enum):
    CELSIUS = "c"
    FAHRENHEIT = "f"


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Mixed(enum.Enum):
    TEXT = "text"
    NUMBER = 1


class BadEnum(enum.Enum):
    POINT = (1, 2)


UserId = NewType("UserId", int)


@dataclasses.dataclass
class Point:
    """A point on the map.

    Attributes:
        x: Horizontal position.
        y (float): Vertical position.
    """

    x: float
    y: float = 0.0


@dataclasses.dataclass
class Route:
    name: str
    stops: list[Point]
    start: Point | None = None
    tags: list[str] = dataclasses.field(default_factory=list)
    internal: int = dataclasses.field(default=0, init=False)


@dataclasses.dataclass
class Node:
    value: int
    children: list[Node]


class Address(TypedDict):
    """A postal address.

    Attributes:
        street: Street and number.
    """

    street: str
    zip: Annotated[str, "Postal code"]
    unit: NotRequired[Unit]


class Options(TypedDict, total=False):
    verbose: bool
    level: Required[int]


# ---------------------------------------------------------------------------------------------
# Tool functions
# ---------------------------------------------------------------------------------------------


def get_weather(city: str, days: int = 3, unit: Unit = Unit.CELSIUS) -> str:
    """Get the weather
    forecast for a city.

    Args:
        city (str): The city name,
            for example Paris (France).
        days: How many days
            to forecast.

        unit: Temperature unit.
    Returns:
        The forecast.
    """
    return city


def no_docstring(value: int) -> None:
    pass


def plain(a, b=1):  # type: ignore[no-untyped-def]
    """Without annotations."""


def unsupported(when: datetime.datetime) -> None:
    """A tool with a type JSON cannot carry."""


def unsupported_nested(when: list[datetime.datetime]) -> None:
    pass


def unsupported_key(counts: dict[int, str]) -> None:
    pass


def recursive(tree: Node) -> None:
    pass


class Service:
    def lookup(self, key: str) -> str:
        return key

    @classmethod
    def build(cls, size: int) -> int:
        return size


# ---------------------------------------------------------------------------------------------
# function_schema: description and docstring parsing
# ---------------------------------------------------------------------------------------------


def test_description_is_the_normalised_summary_before_the_first_section() -> None:
    description, _ = function_schema(get_weather)
    assert description == "Get the weather forecast for a city."


def test_args_section_gives_parameter_descriptions() -> None:
    _, schema = function_schema(get_weather)
    properties = schema["properties"]
    assert properties["city"]["description"] == "The city name, for example Paris (France)."
    assert properties["days"]["description"] == "How many days to forecast."
    assert properties["unit"]["description"] == "Temperature unit."


def test_summary_stops_at_raises_section_and_keeps_all_paragraphs() -> None:
    def tool(x: int) -> None:
        """First paragraph.

        Second   paragraph
        continues.

        Raises:
            ValueError: never.
        """

    assert function_schema(tool)[0] == "First paragraph. Second paragraph continues."


def test_missing_docstring_gives_empty_description_and_no_parameter_descriptions() -> None:
    description, schema = function_schema(no_docstring)
    assert description == ""
    assert schema["properties"]["value"] == {"type": "integer"}


def test_docstring_entries_with_nested_parentheses_and_text_on_the_next_line() -> None:
    def tool(mapping: dict[str, int], other: str, undocumented: int) -> None:
        """Do it.

        Arguments:
            mapping (dict(str, int)): Counts (per name): keep them.
            other:
                Text on the following line.
            not an entry line
        """

    properties = function_schema(tool)[1]["properties"]
    assert properties["mapping"]["description"] == "Counts (per name): keep them."
    assert properties["other"]["description"] == "Text on the following line."
    assert "description" not in properties["undocumented"]


def test_annotated_description_takes_precedence_over_the_docstring() -> None:
    def tool(city: Annotated[str, "From Annotated"], days: Annotated[int, 3]) -> None:
        """Do it.

        Args:
            city: From the docstring.
            days: Days from the docstring.
        """

    properties = function_schema(tool)[1]["properties"]
    assert properties["city"] == {"type": "string", "description": "From Annotated"}
    # Non-string metadata belongs to other libraries and leaves the docstring in charge.
    assert properties["days"] == {"type": "integer", "description": "Days from the docstring."}


# ---------------------------------------------------------------------------------------------
# function_schema: shape, required, defaults, skipped parameters
# ---------------------------------------------------------------------------------------------


def test_schema_shape_required_and_defaults() -> None:
    _, schema = function_schema(get_weather)
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["city"]
    assert schema["properties"]["days"]["default"] == 3
    assert "default" not in schema["properties"]["city"]


def test_enum_default_is_given_as_its_value() -> None:
    _, schema = function_schema(get_weather)
    assert schema["properties"]["unit"]["default"] == "c"
    assert schema["properties"]["unit"]["enum"] == ["c", "f"]


def test_defaults_that_are_not_json_or_not_allowed_are_left_out() -> None:
    marker = object()

    def tool(
        a: Any = marker,
        b: tuple[int, ...] = (1, 2),
        c: int = None,  # type: ignore[assignment]  # noqa: RUF013
        d: int | None = None,
        e: float = float("nan"),
    ) -> None:
        pass

    properties = function_schema(tool)[1]["properties"]
    assert "default" not in properties["a"]
    assert properties["b"]["default"] == [1, 2]
    assert "default" not in properties["c"]  # null is not an integer; the model would be misled
    assert properties["d"]["default"] is None
    assert "default" not in properties["e"]


def test_all_parameters_with_defaults_gives_empty_required_list() -> None:
    def tool(a: int = 1) -> None:
        pass

    assert function_schema(tool)[1]["required"] == []


def test_missing_annotation_means_any_value() -> None:
    description, schema = function_schema(plain)
    assert description == "Without annotations."
    assert schema["properties"] == {"a": {}, "b": {"default": 1}}
    assert schema["required"] == ["a"]


def test_self_cls_varargs_and_kwargs_are_left_out() -> None:
    def tool(a: int, *args: int, b: str, **kwargs: int) -> None:
        pass

    assert list(function_schema(tool)[1]["properties"]) == ["a", "b"]
    assert function_schema(tool)[1]["required"] == ["a", "b"]
    assert list(function_schema(Service.lookup)[1]["properties"]) == ["key"]
    assert list(function_schema(Service().lookup)[1]["properties"]) == ["key"]
    assert list(function_schema(Service.build)[1]["properties"]) == ["size"]


def test_skip_leaves_named_parameters_out() -> None:
    def tool(ctx: datetime.datetime, query: str) -> None:
        pass

    # The skipped parameter's unsupported type is never looked at.
    _, schema = function_schema(tool, skip=["ctx"])
    assert list(schema["properties"]) == ["query"]
    assert schema["required"] == ["query"]


def test_positional_only_parameter_is_a_configuration_error() -> None:
    def tool(a: int, /, b: int) -> None:
        pass

    with pytest.raises(ConfigurationError, match=r"parameter 'a' is positional-only"):
        function_schema(tool)
    assert list(function_schema(tool, skip={"a"})[1]["properties"]) == ["b"]


def test_partial_and_callable_instance() -> None:
    class Counter:
        def __call__(self, step: int = 1) -> int:
            """Count up."""
            return step

    description, schema = function_schema(functools.partial(get_weather, days=5))
    assert description == "Get the weather forecast for a city."
    assert schema["properties"]["days"]["default"] == 5
    assert function_schema(Counter()) == ("Count up.", function_schema(Counter.__call__)[1])


def count_type_hint_reads(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The functions whose type hints are read from now on, in order (a schema cache miss)."""
    calls: list[Any] = []
    real = typing.get_type_hints

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(typing, "get_type_hints", counting)
    return calls


def test_schema_is_cached_per_function_and_callers_cannot_corrupt_the_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def tool(a: int) -> None:
        pass

    calls = count_type_hint_reads(monkeypatch)
    first = function_schema(tool)
    first[1]["properties"]["a"]["type"] = "string"
    second = function_schema(tool)
    assert calls == [tool]
    assert second[1]["properties"]["a"] == {"type": "integer"}


def test_closures_made_afresh_share_one_entry_also_with_plain_attributes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An agent factory defines its tools afresh for every agent: each closure is known by what
    # it is made of, and a plain attribute it was given (the built-in tools carry a marker) is
    # part of that, not a reason to read its hints again for every agent built.
    def make(marker: object) -> Callable[..., Any]:
        def tool(a: int) -> None:
            pass

        tool.__dict__["marker"] = marker
        return tool

    calls = count_type_hint_reads(monkeypatch)
    for _ in range(3):
        assert function_schema(make(True))[1]["properties"] == {"a": {"type": "integer"}}
    assert len(calls) == 1
    function_schema(make(2))  # another value of it: another entry
    assert len(calls) == 2
    wrapped = [make(object()) for _ in range(2)]  # not a plain value: each its own
    for tool in wrapped:
        function_schema(tool)
    assert calls[2:] == wrapped


def test_unhashable_callable_is_described_without_the_cache() -> None:
    class Unhashable:
        __hash__ = None  # type: ignore[assignment]

        def __call__(self, a: int) -> None:
            pass

    assert function_schema(Unhashable())[1]["properties"] == {"a": {"type": "integer"}}


# ---------------------------------------------------------------------------------------------
# function_schema: type mapping
# ---------------------------------------------------------------------------------------------


def _param_schema(annotation: Any) -> dict[str, Any]:
    """The schema function_schema gives one parameter annotated with ``annotation``."""

    def tool(value: int) -> None:
        pass

    tool.__annotations__ = {"value": annotation}
    return function_schema(tool)[1]["properties"]["value"]  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (str, {"type": "string"}),
        (int, {"type": "integer"}),
        (float, {"type": "number"}),
        (bool, {"type": "boolean"}),
        (None, {"type": "null"}),
        (type(None), {"type": "null"}),
        (Any, {}),
        (object, {}),
        (UserId, {"type": "integer"}),
    ],
)
def test_scalars(annotation: Any, expected: dict[str, Any]) -> None:
    assert _param_schema(annotation) == expected


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (list[int], {"type": "array", "items": {"type": "integer"}}),
        (typing.List[str], {"type": "array", "items": {"type": "string"}}),  # noqa: UP006
        (Sequence[str], {"type": "array", "items": {"type": "string"}}),
        (list, {"type": "array"}),
        (tuple[int, ...], {"type": "array", "items": {"type": "integer"}}),
        (
            tuple[int, str],
            {
                "type": "array",
                "prefixItems": [{"type": "integer"}, {"type": "string"}],
                "minItems": 2,
                "maxItems": 2,
            },
        ),
        (tuple, {"type": "array"}),
        (set[str], {"type": "array", "items": {"type": "string"}, "uniqueItems": True}),
        (frozenset[int], {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}),
        (dict[str, int], {"type": "object", "additionalProperties": {"type": "integer"}}),
        (Mapping[str, float], {"type": "object", "additionalProperties": {"type": "number"}}),
        (dict, {"type": "object"}),
        (list[list[bool]], {"type": "array", "items": {"type": "array", "items": {"type": "boolean"}}}),
    ],
)
def test_containers(annotation: Any, expected: dict[str, Any]) -> None:
    assert _param_schema(annotation) == expected


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (Optional[int], {"type": ["integer", "null"]}),  # noqa: UP045
        (int | None, {"type": ["integer", "null"]}),
        (list[str] | None, {"type": ["array", "null"], "items": {"type": "string"}}),
        (int | str, {"anyOf": [{"type": "integer"}, {"type": "string"}]}),
        (int | str | None, {"anyOf": [{"type": "integer"}, {"type": "string"}, {"type": "null"}]}),
        (Any | None, {}),
        (
            Literal["a", "b"] | None,
            {"anyOf": [{"type": "string", "enum": ["a", "b"]}, {"type": "null"}]},
        ),
        (
            Unit | None,
            {"anyOf": [{"type": "string", "enum": ["c", "f"]}, {"type": "null"}]},
        ),
    ],
)
def test_optional_and_unions(annotation: Any, expected: dict[str, Any]) -> None:
    assert _param_schema(annotation) == expected


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (Literal["north", "south"], {"type": "string", "enum": ["north", "south"]}),
        (Literal[1, 2, 3], {"type": "integer", "enum": [1, 2, 3]}),
        (Literal[True], {"type": "boolean", "enum": [True]}),
        (Literal["auto", 0], {"enum": ["auto", 0]}),
        (Literal["a", None], {"enum": ["a", None]}),
    ],
)
def test_literal(annotation: Any, expected: dict[str, Any]) -> None:
    assert _param_schema(annotation) == expected


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (Unit, {"type": "string", "enum": ["c", "f"]}),
        (Priority, {"type": "integer", "enum": [1, 2]}),
        (Mixed, {"enum": ["text", 1]}),
    ],
)
def test_enum(annotation: Any, expected: dict[str, Any]) -> None:
    assert _param_schema(annotation) == expected


def test_annotated_inside_optional_and_list() -> None:
    assert _param_schema(Annotated[int, "  A   count "] | None) == {
        "type": ["integer", "null"],
        "description": "A count",
    }
    assert _param_schema(list[Annotated[str, "A tag"]]) == {
        "type": "array",
        "items": {"type": "string", "description": "A tag"},
    }


def test_nested_dataclass() -> None:
    def tool(route: Route) -> None:
        pass

    point = {
        "type": "object",
        "description": "A point on the map.",
        "properties": {
            "x": {"type": "number", "description": "Horizontal position."},
            "y": {"type": "number", "description": "Vertical position.", "default": 0.0},
        },
        "required": ["x"],
        "additionalProperties": False,
    }
    assert function_schema(tool)[1]["properties"]["route"] == {
        # No description: the docstring @dataclass invents for Route says nothing useful.
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "stops": {"type": "array", "items": point},
            "start": {**point, "type": ["object", "null"], "default": None},
            "tags": {"type": "array", "items": {"type": "string"}},  # factory: not required, no default
        },
        "required": ["name", "stops"],
        "additionalProperties": False,
    }


def test_parameter_description_overrides_the_class_summary() -> None:
    def tool(origin: Point) -> None:
        """Go.

        Args:
            origin: Where to start.
        """

    assert function_schema(tool)[1]["properties"]["origin"]["description"] == "Where to start."


def test_typeddict_total_and_partial() -> None:
    assert _param_schema(Address) == {
        "type": "object",
        "description": "A postal address.",
        "properties": {
            "street": {"type": "string", "description": "Street and number."},
            "zip": {"type": "string", "description": "Postal code"},
            "unit": {"type": "string", "enum": ["c", "f"]},
        },
        "required": ["street", "zip"],
        "additionalProperties": False,
    }
    assert _param_schema(Options) == {
        "type": "object",
        "properties": {"verbose": {"type": "boolean"}, "level": {"type": "integer"}},
        "required": ["level"],
        "additionalProperties": False,
    }


# ---------------------------------------------------------------------------------------------
# function_schema: unsupported annotations
# ---------------------------------------------------------------------------------------------


def test_unsupported_type_names_function_parameter_type_and_remedy() -> None:
    with pytest.raises(ConfigurationError) as caught:
        function_schema(unsupported)
    message = str(caught.value)
    assert "'unsupported'" in message
    assert "parameter 'when'" in message
    assert "datetime.datetime" in message
    assert "register_with_schema" in message


def test_unsupported_type_inside_a_container_names_both() -> None:
    with pytest.raises(ConfigurationError, match=r"datetime\.datetime \(in list\[datetime\.datetime\]\)"):
        function_schema(unsupported_nested)


def test_non_string_dict_keys_are_unsupported() -> None:
    with pytest.raises(ConfigurationError, match="keys are always strings"):
        function_schema(unsupported_key)


def test_recursive_dataclass_is_unsupported() -> None:
    with pytest.raises(ConfigurationError, match="recursive types are not supported"):
        function_schema(recursive)


@pytest.mark.parametrize("annotation", [BadEnum, Literal[1.5], bytes, typing.Callable[[], int]])
def test_other_unsupported_annotations(annotation: Any) -> None:
    with pytest.raises(ConfigurationError, match="cannot be described as JSON Schema"):
        _param_schema(annotation)


def test_unresolvable_annotation_is_a_configuration_error() -> None:
    def tool(value: NotDefinedAnywhere) -> None:  # type: ignore[name-defined]  # noqa: F821
        pass

    with pytest.raises(ConfigurationError, match=r"cannot resolve the type annotations.*NotDefinedAnywhere"):
        function_schema(tool)


# ---------------------------------------------------------------------------------------------
# validate_arguments
# ---------------------------------------------------------------------------------------------

WEATHER = function_schema(get_weather)[1]


def test_valid_arguments_give_no_errors() -> None:
    assert validate_arguments(WEATHER, {"city": "Paris"}) == []
    assert validate_arguments(WEATHER, {"city": "Paris", "days": 2, "unit": "f"}) == []


def test_missing_required_argument() -> None:
    assert validate_arguments(WEATHER, {}) == ["'city' is a required property"]


def test_wrong_type() -> None:
    assert validate_arguments(WEATHER, {"city": "Paris", "days": "three"}) == [
        "argument 'days': expected integer, got string \"three\""
    ]


def test_unexpected_argument() -> None:
    assert validate_arguments(WEATHER, {"city": "Paris", "foo": 1}) == ["unexpected argument 'foo'"]


def test_several_errors_are_all_reported() -> None:
    errors = validate_arguments(WEATHER, {"days": None, "foo": 1})
    assert errors == [
        "'city' is a required property",
        "argument 'days': expected integer, got null",
        "unexpected argument 'foo'",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("Paris", 'arguments: expected object, got string "Paris"'),
        (["Paris"], 'arguments: expected object, got array ["Paris"]'),
        (None, "arguments: expected object, got null"),
    ],
)
def test_non_object_arguments_are_an_error_not_an_exception(args: Any, message: str) -> None:
    assert validate_arguments(WEATHER, args) == [message]


def test_bool_is_neither_integer_nor_number() -> None:
    assert validate_arguments({"type": "integer"}, True) == ["arguments: expected integer, got boolean true"]
    assert validate_arguments({"type": "number"}, False) == ["arguments: expected number, got boolean false"]
    assert validate_arguments({"type": "boolean"}, 1) == ["arguments: expected boolean, got integer 1"]


def test_integer_and_number() -> None:
    assert validate_arguments({"type": "number"}, 3) == []
    assert validate_arguments({"type": "number"}, 3.5) == []
    assert validate_arguments({"type": "integer"}, 3) == []
    assert validate_arguments({"type": "integer"}, 3.0) == []  # JSON Schema: 3.0 is an integer
    assert validate_arguments({"type": "integer"}, 3.5) == ["arguments: expected integer, got number 3.5"]


def test_type_list() -> None:
    schema = {"type": ["string", "null"]}
    assert validate_arguments(schema, None) == []
    assert validate_arguments(schema, "x") == []
    assert validate_arguments(schema, 1) == ["arguments: expected string or null, got integer 1"]


def test_enum_and_const() -> None:
    assert validate_arguments(WEATHER, {"city": "Paris", "unit": "kelvin"}) == [
        'argument \'unit\': "kelvin" is not one of "c", "f"'
    ]
    assert validate_arguments({"enum": [1, 2]}, True) == ["arguments: true is not one of 1, 2"]
    assert validate_arguments({"enum": [1, 2]}, 1.0) == []
    assert validate_arguments({"const": "x"}, "x") == []
    assert validate_arguments({"const": "x"}, "y") == ['arguments: must be "x", got "y"']
    assert validate_arguments({"const": [1, {"a": True}]}, [1, {"a": True}]) == []
    assert validate_arguments({"const": [1, {"a": True}]}, [1, {"a": 1}]) != []


def test_nested_paths_in_arrays_and_objects() -> None:
    def tool(route: Route) -> None:
        pass

    schema = function_schema(tool)[1]
    args = {"route": {"name": "r", "stops": [{"x": 1}, {"x": "far", "z": 0}, {}]}}
    assert validate_arguments(schema, args) == [
        "argument 'route/stops/1/x': expected number, got string \"far\"",
        "unexpected argument 'route/stops/1/z'",
        "'x' is a required property of argument 'route/stops/2'",
    ]


def test_additional_properties_schema() -> None:
    schema = {"type": "object", "additionalProperties": {"type": "integer"}}
    assert validate_arguments(schema, {"a": 1, "b": 2}) == []
    assert validate_arguments(schema, {"a": "1"}) == ["argument 'a': expected integer, got string \"1\""]


def test_pattern_properties_are_not_additional() -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "patternProperties": {"^x-": {"type": "integer"}, "(bad regex": {"type": "null"}},
        "additionalProperties": False,
    }
    assert validate_arguments(schema, {"name": "n", "x-count": 1}) == []
    assert validate_arguments(schema, {"x-count": "1", "other": 1}) == [
        "argument 'x-count': expected integer, got string \"1\"",
        "unexpected argument 'other'",
    ]


def test_array_length_and_uniqueness() -> None:
    schema = {"type": "array", "minItems": 1, "maxItems": 2, "uniqueItems": True}
    assert validate_arguments(schema, [1]) == []
    assert validate_arguments(schema, []) == ["arguments: expected at least 1 item, got 0"]
    assert validate_arguments(schema, [1, 2, 3]) == ["arguments: expected at most 2 items, got 3"]
    assert validate_arguments(schema, [1, 1.0]) == [
        "arguments: items must be unique, but 1.0 appears more than once"
    ]
    assert validate_arguments(schema, [1, True]) == []  # true is not 1 in JSON


def test_fixed_length_tuple() -> None:
    schema = _param_schema(tuple[int, str])
    assert validate_arguments(schema, [1, "a"]) == []
    assert validate_arguments(schema, ["a", 1]) == [
        "argument '0': expected integer, got string \"a\"",
        "argument '1': expected string, got integer 1",
    ]
    assert validate_arguments(schema, [1]) == ["arguments: expected at least 2 items, got 1"]


def test_draft7_items_list_with_additional_items() -> None:
    schema = {"items": [{"type": "string"}], "additionalItems": False}
    assert validate_arguments(schema, ["a"]) == []
    assert validate_arguments(schema, ["a", 1]) == ["argument '1': no value is allowed here"]


def test_string_length_and_pattern() -> None:
    schema = {"type": "string", "minLength": 2, "maxLength": 3, "pattern": "^[a-z]+$"}
    assert validate_arguments(schema, "abc") == []
    assert validate_arguments(schema, "a") == ["arguments: expected at least 2 characters, got 1"]
    assert validate_arguments(schema, "abcd") == ["arguments: expected at most 3 characters, got 4"]
    assert validate_arguments(schema, "AB") == ['arguments: "AB" does not match the pattern "^[a-z]+$"']


def test_numeric_bounds() -> None:
    schema = {"minimum": 1, "maximum": 10}
    assert validate_arguments(schema, 1) == []
    assert validate_arguments(schema, 10.0) == []
    assert validate_arguments(schema, 0) == ["arguments: must be >= 1, got 0"]
    assert validate_arguments(schema, 10.5) == ["arguments: must be <= 10, got 10.5"]
    exclusive = {"exclusiveMinimum": 0, "exclusiveMaximum": 1}
    assert validate_arguments(exclusive, 0.5) == []
    assert validate_arguments(exclusive, 0) == ["arguments: must be > 0, got 0"]
    assert validate_arguments(exclusive, 1) == ["arguments: must be < 1, got 1"]
    # Bounds apply to numbers only; a string is left to the "type" keyword.
    assert validate_arguments(schema, "5") == []


def test_any_of_reports_the_alternatives() -> None:
    schema = {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert validate_arguments(schema, 1) == []
    assert validate_arguments(schema, "a") == []
    assert validate_arguments(schema, [1]) == ["arguments: expected integer or string, got array [1]"]


def test_any_of_reports_the_only_plausible_alternative_in_detail() -> None:
    schema = _param_schema(Unit | None)
    assert validate_arguments(schema, None) == []
    assert validate_arguments(schema, "kelvin") == ['arguments: "kelvin" is not one of "c", "f"']
    assert validate_arguments(schema, 3) == ['arguments: expected one of "c", "f" or null, got integer 3']


def test_one_of() -> None:
    schema = {"oneOf": [{"type": "integer"}, {"type": "number"}]}
    assert validate_arguments(schema, 1.5) == []
    assert validate_arguments(schema, 1) == [
        "arguments: matches 2 of the alternatives, but must match exactly one"
    ]
    assert validate_arguments(schema, "x") == ['arguments: expected integer or number, got string "x"']


def test_all_of() -> None:
    schema = {"allOf": [{"type": "integer"}, {"minimum": 5}]}
    assert validate_arguments(schema, 6) == []
    assert validate_arguments(schema, 4) == ["arguments: must be >= 5, got 4"]


def test_boolean_schemas() -> None:
    assert validate_arguments(True, {"anything": 1}) == []  # type: ignore[arg-type]
    assert validate_arguments(False, 1) == ["arguments: no value is allowed here"]  # type: ignore[arg-type]
    schema = {"type": "object", "properties": {"a": True, "b": False}}
    assert validate_arguments(schema, {"a": 1, "b": 2}) == ["argument 'b': no value is allowed here"]


def test_unknown_keywords_are_ignored() -> None:
    schema = {
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "date-time"},
            "ref": {"$ref": "#/$defs/Thing"},
            "neg": {"not": {"type": "string"}},
            "cond": {"if": {"type": "string"}, "then": {"minLength": 100}},
        },
        "$defs": {"Thing": {"type": "integer"}},
        "x-vendor-extension": {"anything": True},
    }
    args = {"when": "not a date", "ref": "anything", "neg": "a string", "cond": "short"}
    assert validate_arguments(schema, args) == []


@pytest.mark.parametrize(
    "schema",
    [
        {"type": 5},
        {"type": ["strng", {"x": 1}]},
        {"required": "city"},
        {"required": [1, None]},
        {"properties": ["city"]},
        {"properties": {"city": "string"}},
        {"additionalProperties": "no"},
        {"items": "string", "prefixItems": {"type": "x"}},
        {"minItems": "1", "maxLength": None, "minimum": "0", "maximum": True},
        {"enum": "abc", "anyOf": {"type": "string"}, "oneOf": [], "allOf": "x"},
        {"pattern": "(unclosed"},
        {"pattern": 5, "uniqueItems": "yes"},
    ],
)
def test_malformed_keywords_never_raise(schema: dict[str, Any]) -> None:
    for value in ({"city": "x"}, ["a", "a"], "a", 0, None):
        assert validate_arguments(schema, value) == []


def test_long_values_are_shortened_in_messages() -> None:
    [message] = validate_arguments({"type": "integer"}, "x" * 500)
    assert message == 'arguments: expected integer, got string "' + "x" * 76 + "..."


def test_function_schema_defaults_pass_its_own_validation() -> None:
    def tool(route: Route, options: Options, when: Literal["now", "later"] = "now") -> None:
        pass

    schema = function_schema(tool)[1]
    args = {"route": {"name": "r", "stops": [{"x": 1.5}]}, "options": {"level": 2}}
    assert validate_arguments(schema, args) == []


# ---------------------------------------------------------------------------------------------
# bind_arguments
# ---------------------------------------------------------------------------------------------


def test_enum_parameter_receives_the_member() -> None:
    assert bind_arguments(get_weather, {"city": "Paris", "unit": "f"}) == {
        "city": "Paris",
        "unit": Unit.FAHRENHEIT,
    }


def test_optional_enum_and_none() -> None:
    def tool(unit: Unit | None = None, level: Priority | None = None) -> None:
        pass

    assert bind_arguments(tool, {"unit": "c", "level": 2}) == {"unit": Unit.CELSIUS, "level": Priority.HIGH}
    assert bind_arguments(tool, {"unit": None}) == {"unit": None}


def test_nested_dataclasses_are_instantiated() -> None:
    def tool(route: Route) -> None:
        pass

    args = {"route": {"name": "r", "stops": [{"x": 1, "y": 2}], "start": {"x": 0}}}
    bound = bind_arguments(tool, args)
    assert bound == {"route": Route(name="r", stops=[Point(1, 2)], start=Point(0))}
    assert isinstance(bound["route"].stops[0], Point)


def test_typeddict_values_have_their_contents_converted() -> None:
    def tool(address: Address) -> None:
        pass

    bound = bind_arguments(tool, {"address": {"street": "Main 1", "zip": "123", "unit": "f"}})
    assert bound == {"address": {"street": "Main 1", "zip": "123", "unit": Unit.FAHRENHEIT}}
    assert type(bound["address"]) is dict


def test_tuples_sets_and_mappings() -> None:
    def tool(
        pair: tuple[int, Unit],
        many: tuple[Unit, ...],
        tags: set[str],
        frozen: frozenset[int],
        units: dict[str, Unit],
        anything: tuple,  # type: ignore[type-arg]
    ) -> None:
        pass

    args = {
        "pair": [1, "c"],
        "many": ["c", "f"],
        "tags": ["a", "b"],
        "frozen": [1],
        "units": {"x": "f"},
        "anything": [1, "a"],
    }
    assert bind_arguments(tool, args) == {
        "pair": (1, Unit.CELSIUS),
        "many": (Unit.CELSIUS, Unit.FAHRENHEIT),
        "tags": {"a", "b"},
        "frozen": frozenset({1}),
        "units": {"x": Unit.FAHRENHEIT},
        "anything": (1, "a"),
    }


def test_integral_float_becomes_int() -> None:
    def tool(count: int, ratio: float) -> None:
        pass

    bound = bind_arguments(tool, {"count": 3.0, "ratio": 2})
    assert bound == {"count": 3, "ratio": 2}
    assert type(bound["count"]) is int
    assert type(bound["ratio"]) is int  # an int is a valid float argument; left alone


def test_union_converts_with_the_first_matching_member() -> None:
    def tool(target: Point | str, user: Annotated[UserId, "Who"]) -> None:
        pass

    assert bind_arguments(tool, {"target": {"x": 1}, "user": 7}) == {"target": Point(1), "user": 7}
    assert bind_arguments(tool, {"target": "home"}) == {"target": "home"}


def test_other_values_pass_through_unchanged() -> None:
    def tool(data: dict[str, Any], items: list[str], free: Any, choice: Literal["a", "b"]) -> None:
        pass

    data = {"nested": [1, 2]}
    bound = bind_arguments(tool, {"data": data, "items": ["x"], "free": {"k": 1}, "choice": "a"})
    assert bound == {"data": data, "items": ["x"], "free": {"k": 1}, "choice": "a"}


def test_unknown_and_skipped_keys_are_dropped() -> None:
    def tool(ctx: object, query: str) -> None:
        pass

    assert bind_arguments(tool, {"query": "q", "extra": 1, "ctx": "forged"}, skip={"ctx"}) == {"query": "q"}


def test_unknown_keys_reach_var_keyword_parameter() -> None:
    def tool(query: str, **extra: Any) -> None:
        pass

    assert bind_arguments(tool, {"query": "q", "extra": 1}) == {"query": "q", "extra": 1}


def test_bound_method_binding_leaves_out_self() -> None:
    bound = bind_arguments(Service().lookup, {"key": "k"})
    assert bound == {"key": "k"}
    assert Service().lookup(**bound) == "k"


def test_invalid_enum_value_raises_when_not_validated_first() -> None:
    with pytest.raises(ValueError):
        bind_arguments(get_weather, {"city": "Paris", "unit": "kelvin"})


def test_copy_schema_copies_every_container_and_shares_no_mutable_part() -> None:
    from harnessx._tool_schema import copy_schema

    marker = {"kept": ["as", "is"]}
    original = {
        "type": "object",
        "properties": {"a": {"enum": ["x", 1, 2.5, True, None]}},
        "x-extra": (marker,),
    }
    copied = copy_schema(original)
    assert copied == original
    copied["properties"]["a"]["enum"].append("y")
    copied["x-extra"][0]["kept"].append("changed")  # not JSON: copied by copy.deepcopy
    assert original["properties"]["a"]["enum"] == ["x", 1, 2.5, True, None]
    assert marker == {"kept": ["as", "is"]}


# ---------------------------------------------------------------------------------------------
# A factory's closures: the schema is built once per definition, not once per agent
# ---------------------------------------------------------------------------------------------


def _make_handler(name: str, limit: int = 5) -> Any:
    def handler(item: str, count: int = limit) -> str:
        """Do the work.

        Args:
            item: What to do.
            count: How many times.
        """
        return item * count

    handler.__name__ = name
    return handler


def test_a_closure_made_again_is_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from harnessx import _tool_schema

    loads: list[str] = []
    real = _tool_schema._load_function_info

    def counted(fn: Any) -> Any:
        loads.append(fn.__name__)
        return real(fn)

    monkeypatch.setattr(_tool_schema._function_infos, "_build", counted)
    _tool_schema._function_infos.clear()
    _tool_schema._function_schemas.clear()
    first = function_schema(_make_handler("cached_tool"))
    again = [function_schema(_make_handler("cached_tool")) for _ in range(3)]
    assert all(schema == first for schema in again)
    bound = bind_arguments(_make_handler("cached_tool"), {"item": "x", "count": 2.0})
    assert bound == {"item": "x", "count": 2}
    assert loads == ["cached_tool"]  # read once, for the schema and the binding alike


def _make_any(default: Any) -> Any:
    def handler(value: Any = default) -> None:
        """Take a value."""

    return handler


def test_closures_that_differ_get_their_own_schema() -> None:
    # Another default (its type too: True and 1 are equal, and hash alike), another name.
    assert function_schema(_make_handler("t", 5))[1]["properties"]["count"]["default"] == 5
    assert function_schema(_make_handler("t", 7))[1]["properties"]["count"]["default"] == 7
    assert function_schema(_make_any(1))[1]["properties"]["value"]["default"] == 1
    assert function_schema(_make_any(True))[1]["properties"]["value"]["default"] is True
    assert function_schema(_make_any([1]))[1]["properties"]["value"]["default"] == [1]  # unhashable
    assert function_schema(_make_any([2]))[1]["properties"]["value"]["default"] == [2]


def test_a_function_with_attributes_of_its_own_is_known_by_identity() -> None:
    # Two wrappers made by the same decorator, wrapping functions that look alike but take
    # different parameters: functools.wraps copies name, docstring and annotations, so only
    # __wrapped__ (an attribute of the function's own) tells them apart.
    def first(item: str) -> str:
        """Alike."""
        return item

    def second(other: int) -> str:
        """Alike."""
        return str(other)

    second.__name__, second.__qualname__ = first.__name__, first.__qualname__
    second.__annotations__ = first.__annotations__

    def wrap(fn: Any) -> Any:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        return wrapper

    assert set(function_schema(wrap(first))[1]["properties"]) == {"item"}
    assert set(function_schema(wrap(second))[1]["properties"]) == {"other"}
