"""Replies built with the vendors' own SDK types, and the SDKs' own view of them.

Used by ``test_sdk_conformance.py``: a reply is built from ``openai`` / ``anthropic`` model
classes (so it has the shape the vendor documents, not the one our parser expects),
serialised the way the API sends it, and read back both by our providers and by the SDK's
own client and accumulators. ``expected_*`` turn what the SDK assembled into the values our
``ProviderResponse`` must hold.
"""

from __future__ import annotations

import collections.abc
import json
import types
import typing
from typing import Any

import typing_extensions as te
from anthropic import types as at
from anthropic.types import raw_message_delta_event as at_delta
from openai.types import completion_usage as ou
from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessage
from openai.types.chat import chat_completion as occ
from openai.types.chat import chat_completion_chunk as ochunk
from openai.types.chat.chat_completion_message_function_tool_call import (
    ChatCompletionMessageFunctionToolCall,
    Function,
)
from pydantic import BaseModel

from harnessx.providers import StopReason, TokenUsage, ToolCall

# --------------------------------------------------------------------------- serialising


def openai_sse(chunks: list[ChatCompletionChunk]) -> list[str]:
    # Only the fields set: OpenAI leaves out what a chunk does not carry (a later tool-call
    # fragment has no id, name or type).
    return [f"data: {chunk.model_dump_json(exclude_unset=True)}\n\n" for chunk in chunks] + [
        "data: [DONE]\n\n"
    ]


def anthropic_sse(events: list[BaseModel]) -> list[str]:
    out = []
    for event in events:
        data = event.model_dump(mode="json", exclude_unset=True)
        out.append(f"event: {data['type']}\ndata: {json.dumps(data)}\n\n")
    return out


def request_is_valid(params_type: Any, body: Any) -> list[str]:
    """What in ``body`` the SDK's request type (a ``TypedDict``) does not allow; empty when
    the SDK could have sent it.

    A walk of the type itself, not pydantic: pydantic drops keys a ``TypedDict`` does not
    declare (and validates ``Iterable`` fields lazily), so it would pass a body with a field
    the API refuses. Here an unknown key, a missing required one, a value outside a
    ``Literal`` or of the wrong JSON kind is each reported with where it is.
    """
    return _check(params_type, body, "body")


_SEQUENCES = (list, tuple, collections.abc.Iterable, collections.abc.Sequence)


def _check(tp: Any, value: Any, where: str) -> list[str]:
    origin, args = te.get_origin(tp), te.get_args(tp)
    if tp is Any or tp is object:
        return []
    if origin in (te.Annotated, te.Required, te.NotRequired, te.ReadOnly):
        return _check(args[0], value, where)
    if te.is_typeddict(tp):
        return _check_typeddict(tp, value, where)
    if origin in (typing.Union, types.UnionType):
        tried = [_check(alternative, value, where) for alternative in args]
        # None fits: fine. Otherwise the closest alternative says what is wrong.
        return [] if any(not found for found in tried) else min(tried, key=len)
    if origin is te.Literal:
        fits = any(value == allowed and type(value) is type(allowed) for allowed in args)
        return [] if fits else [f"{where}: {value!r} is not one of {list(args)}"]
    if origin in _SEQUENCES or getattr(origin, "__name__", "") == "SequenceNotStr":
        if not isinstance(value, list):
            return [f"{where}: expected an array, got {type(value).__name__}"]
        return [found for i, item in enumerate(value) for found in _check(args[0], item, f"{where}[{i}]")]
    if origin in (dict, collections.abc.Mapping):
        if not isinstance(value, dict):
            return [f"{where}: expected an object, got {type(value).__name__}"]
        return [found for key, item in value.items() for found in _check(args[1], item, f"{where}.{key}")]
    kinds: dict[Any, tuple[type, ...]] = {str: (str,), int: (int,), float: (int, float), bool: (bool,)}
    if tp is type(None):
        return [] if value is None else [f"{where}: expected null, got {value!r}"]
    if tp in kinds:
        if isinstance(value, kinds[tp]) and (tp is bool or not isinstance(value, bool)):
            return []
        return [f"{where}: expected {tp.__name__}, got {type(value).__name__}"]
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        # The SDK also takes its response objects back as input; a JSON body never holds one.
        return [f"{where}: would be an SDK {tp.__name__} object"]
    raise TypeError(f"{where}: no check for {tp!r} (extend sdk_wire._check)")


def _check_typeddict(tp: Any, value: Any, where: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where}: expected an object ({tp.__name__}), got {type(value).__name__}"]
    fields = te.get_type_hints(tp, include_extras=True)
    found = [f"{where}.{key}: not in the SDK's {tp.__name__}" for key in value if key not in fields]
    found += [
        f"{where}.{key}: required by {tp.__name__}"
        for key in sorted(_required(tp, fields))
        if key not in value
    ]
    for key in value.keys() & fields.keys():
        found += _check(fields[key], value[key], f"{where}.{key}")
    return found


def _required(tp: Any, fields: dict[str, Any]) -> set[str]:
    # __required_keys__ cannot see Required[...] in string annotations (the SDK's modules use
    # ``from __future__ import annotations``), so work it out from the resolved hints: a
    # key is required when marked so, or when the class declaring it is total.
    required = set()
    for key, hint in fields.items():
        marker = te.get_origin(hint)
        total = getattr(_declaring(tp, key), "__total__", True)
        if marker is te.Required or (marker is not te.NotRequired and total):
            required.add(key)
    return required


def _declaring(tp: Any, key: str) -> Any:
    """The TypedDict among ``tp`` and its bases that declares ``key`` (whose totality counts)."""
    for base in getattr(tp, "__orig_bases__", ()):
        if te.is_typeddict(base) and key in base.__annotations__:
            return _declaring(base, key)
    return tp


# --------------------------------------------------------------------------- OpenAI replies

_CREATED = 1_800_000_000


def _chunk(delta: ochunk.ChoiceDelta, finish: str | None = None, **extra: Any) -> ChatCompletionChunk:
    choice = ochunk.Choice(index=0, delta=delta, finish_reason=finish)  # type: ignore[arg-type]
    return ChatCompletionChunk(
        id="chatcmpl-sdk",
        object="chat.completion.chunk",
        created=_CREATED,
        model="gpt-sdk",
        choices=[choice],
        **extra,
    )


def _usage_chunk(prompt: int, completion: int, cached: int = 0) -> ChatCompletionChunk:
    usage = ou.CompletionUsage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        prompt_tokens_details=ou.PromptTokensDetails(cached_tokens=cached),
    )
    return ChatCompletionChunk(
        id="chatcmpl-sdk",
        object="chat.completion.chunk",
        created=_CREATED,
        model="gpt-sdk",
        choices=[],
        usage=usage,
    )


def _call_fragment(
    index: int, arguments: str, call_id: str | None = None, name: str | None = None
) -> ochunk.ChoiceDeltaToolCall:
    if call_id is None:  # a later fragment: the index and more of the arguments
        return ochunk.ChoiceDeltaToolCall(
            index=index, function=ochunk.ChoiceDeltaToolCallFunction(arguments=arguments)
        )
    return ochunk.ChoiceDeltaToolCall(
        index=index,
        id=call_id,
        type="function",
        function=ochunk.ChoiceDeltaToolCallFunction(name=name, arguments=arguments),
    )


def openai_stream(scenario: str) -> list[ChatCompletionChunk]:
    role = _chunk(ochunk.ChoiceDelta(role="assistant", content=""))
    if scenario == "text":
        pieces = ["The weather", " in Oslo", " is sunny", " — 21 °C."]
        return [
            role,
            *(_chunk(ochunk.ChoiceDelta(content=p)) for p in pieces),
            _chunk(ochunk.ChoiceDelta(), "stop"),
            _usage_chunk(31, 12, cached=16),
        ]
    if scenario == "parallel_tool_calls":
        fragments = [
            _call_fragment(0, "", "call_oslo", "get_weather"),
            _call_fragment(0, '{"city"'),
            _call_fragment(0, ': "Oslo"}'),
            _call_fragment(1, "", "call_bergen", "get_weather"),
            _call_fragment(1, '{"city": "Ber'),
            _call_fragment(1, 'gen"}'),
        ]
        return [
            _chunk(ochunk.ChoiceDelta(role="assistant", content="Checking both.")),
            *(_chunk(ochunk.ChoiceDelta(tool_calls=[fragment])) for fragment in fragments),
            _chunk(ochunk.ChoiceDelta(), "tool_calls"),
            _usage_chunk(80, 40),
        ]
    if scenario == "refusal":
        return [
            _chunk(ochunk.ChoiceDelta(role="assistant", content=None, refusal="")),
            _chunk(ochunk.ChoiceDelta(refusal="I'm sorry, ")),
            _chunk(ochunk.ChoiceDelta(refusal="I can't help with that.")),
            _chunk(ochunk.ChoiceDelta(), "stop"),
            _usage_chunk(20, 9),
        ]
    if scenario == "length":
        return [
            role,
            _chunk(ochunk.ChoiceDelta(content="Once upon a time")),
            _chunk(ochunk.ChoiceDelta(), "length"),
            _usage_chunk(10, 4),
        ]
    raise ValueError(scenario)


def openai_completion(scenario: str) -> ChatCompletion:
    usage = ou.CompletionUsage(
        prompt_tokens=64,
        completion_tokens=21,
        total_tokens=85,
        prompt_tokens_details=ou.PromptTokensDetails(cached_tokens=32),
    )
    if scenario == "parallel_tool_calls":
        calls = [
            ChatCompletionMessageFunctionToolCall(
                id=f"call_{city.lower()}",
                type="function",
                function=Function(name="get_weather", arguments=json.dumps({"city": city})),
            )
            for city in ("Oslo", "Bergen")
        ]
        message = ChatCompletionMessage(role="assistant", content=None, tool_calls=calls)  # type: ignore[arg-type]
        finish = "tool_calls"
    elif scenario == "refusal":
        message = ChatCompletionMessage(role="assistant", content=None, refusal="I can't help with that.")
        finish = "stop"
    elif scenario == "text":
        message = ChatCompletionMessage(role="assistant", content="Sunny, 21 °C.")
        finish = "stop"
    else:
        raise ValueError(scenario)
    choice = occ.Choice(index=0, message=message, finish_reason=finish)  # type: ignore[arg-type]
    return ChatCompletion(
        id="chatcmpl-sdk",
        object="chat.completion",
        created=_CREATED,
        model="gpt-sdk",
        choices=[choice],
        usage=usage,
    )


_OPENAI_FINISH = {
    "stop": StopReason.END_TURN,
    "tool_calls": StopReason.TOOL_USE,
    "length": StopReason.MAX_TOKENS,
    "content_filter": StopReason.SAFETY,
}


def expected_from_openai(completion: Any) -> dict[str, Any]:
    """What a ``ProviderResponse`` must say, from the SDK's (accumulated) completion."""
    choice = completion.choices[0]
    message = choice.message
    usage = completion.usage
    details = usage.prompt_tokens_details
    return {
        "text": (message.content or "") + (message.refusal or ""),
        "tool_calls": [
            ToolCall(call.id, call.function.name, json.loads(call.function.arguments or "{}"))
            for call in message.tool_calls or []
        ],
        "stop_reason": StopReason.REFUSAL if message.refusal else _OPENAI_FINISH[choice.finish_reason],
        "usage": TokenUsage(
            input_tokens=usage.prompt_tokens,
            output_tokens=usage.completion_tokens,
            cache_read_input_tokens=(details.cached_tokens or 0) if details else 0,
        ),
    }


# --------------------------------------------------------------------------- Anthropic replies

SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"
REDACTED = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qyP"


def _start(usage: at.Usage) -> at.RawMessageStartEvent:
    message = at.Message(
        id="msg_sdk",
        type="message",
        role="assistant",
        model="claude-sdk",
        content=[],
        stop_reason=None,
        stop_sequence=None,
        usage=usage,
    )
    return at.RawMessageStartEvent(type="message_start", message=message)


def _block(index: int, block: BaseModel) -> at.RawContentBlockStartEvent:
    return at.RawContentBlockStartEvent(type="content_block_start", index=index, content_block=block)  # type: ignore[arg-type]


def _delta(index: int, delta: BaseModel) -> at.RawContentBlockDeltaEvent:
    return at.RawContentBlockDeltaEvent(type="content_block_delta", index=index, delta=delta)  # type: ignore[arg-type]


def _stop(index: int) -> at.RawContentBlockStopEvent:
    return at.RawContentBlockStopEvent(type="content_block_stop", index=index)


def _end(stop_reason: str, output_tokens: int) -> list[BaseModel]:
    delta = at_delta.Delta(stop_reason=stop_reason, stop_sequence=None)  # type: ignore[arg-type]
    usage = at.MessageDeltaUsage(output_tokens=output_tokens)
    return [
        at.RawMessageDeltaEvent(type="message_delta", delta=delta, usage=usage),
        at.RawMessageStopEvent(type="message_stop"),
    ]


def _tool_use(index: int, call_id: str, city: str) -> list[BaseModel]:
    return [
        _block(index, at.ToolUseBlock(type="tool_use", id=call_id, name="get_weather", input={})),
        _delta(index, at.InputJSONDelta(type="input_json_delta", partial_json='{"ci')),
        _delta(index, at.InputJSONDelta(type="input_json_delta", partial_json=f'ty": "{city}"}}')),
        _stop(index),
    ]


def anthropic_stream(scenario: str) -> list[BaseModel]:
    usage = at.Usage(
        input_tokens=25, output_tokens=1, cache_read_input_tokens=100, cache_creation_input_tokens=7
    )
    if scenario == "text":
        return [
            _start(usage),
            _block(0, at.TextBlock(type="text", text="")),
            _delta(0, at.TextDelta(type="text_delta", text="Sunny in Oslo, ")),
            _delta(0, at.TextDelta(type="text_delta", text="21 °C.")),
            _stop(0),
            *_end("end_turn", 11),
        ]
    if scenario == "thinking_and_parallel_tool_use":
        return [
            _start(usage),
            _block(0, at.ThinkingBlock(type="thinking", thinking="", signature="")),
            _delta(0, at.ThinkingDelta(type="thinking_delta", thinking="Two cities, ")),
            _delta(0, at.ThinkingDelta(type="thinking_delta", thinking="so two calls.")),
            _delta(0, at.SignatureDelta(type="signature_delta", signature=SIGNATURE)),
            _stop(0),
            _block(1, at.RedactedThinkingBlock(type="redacted_thinking", data=REDACTED)),
            _stop(1),
            _block(2, at.TextBlock(type="text", text="")),
            _delta(2, at.TextDelta(type="text_delta", text="Checking both.")),
            _stop(2),
            *_tool_use(3, "toolu_oslo", "Oslo"),
            *_tool_use(4, "toolu_bergen", "Bergen"),
            *_end("tool_use", 90),
        ]
    if scenario == "max_tokens":
        return [
            _start(usage),
            _block(0, at.TextBlock(type="text", text="Once upon")),
            _delta(0, at.TextDelta(type="text_delta", text=" a time")),
            _stop(0),
            *_end("max_tokens", 4),
        ]
    raise ValueError(scenario)


def anthropic_message(scenario: str) -> at.Message:
    blocks: list[Any]
    if scenario == "thinking_and_parallel_tool_use":
        blocks = [
            at.ThinkingBlock(type="thinking", thinking="Two cities, so two calls.", signature=SIGNATURE),
            at.RedactedThinkingBlock(type="redacted_thinking", data=REDACTED),
            at.TextBlock(type="text", text="Checking both."),
            at.ToolUseBlock(type="tool_use", id="toolu_oslo", name="get_weather", input={"city": "Oslo"}),
            at.ToolUseBlock(type="tool_use", id="toolu_bergen", name="get_weather", input={"city": "Bergen"}),
        ]
        stop = "tool_use"
    elif scenario == "refusal":
        blocks = [at.TextBlock(type="text", text="I can't help with that.")]
        stop = "refusal"
    elif scenario == "text":
        blocks = [at.TextBlock(type="text", text="Oslo is sunny; the Bergen station is offline.")]
        stop = "end_turn"
    else:
        raise ValueError(scenario)
    return at.Message(
        id="msg_sdk",
        type="message",
        role="assistant",
        model="claude-sdk",
        content=blocks,
        stop_reason=stop,  # type: ignore[arg-type]
        stop_sequence=None,
        usage=at.Usage(input_tokens=40, output_tokens=90, cache_read_input_tokens=10),
    )


_ANTHROPIC_STOP = {
    "end_turn": StopReason.END_TURN,
    "tool_use": StopReason.TOOL_USE,
    "max_tokens": StopReason.MAX_TOKENS,
    "stop_sequence": StopReason.STOP_SEQUENCE,
    "refusal": StopReason.REFUSAL,
    "pause_turn": StopReason.PAUSE_TURN,
}


def expected_from_anthropic(message: at.Message) -> dict[str, Any]:
    """What a ``ProviderResponse`` must say, from the SDK's (accumulated) message."""
    usage = message.usage
    cache_read = usage.cache_read_input_tokens or 0
    cache_write = usage.cache_creation_input_tokens or 0
    thinking = [block.thinking for block in message.content if block.type == "thinking"]
    return {
        "text": "".join(block.text for block in message.content if block.type == "text"),
        "thinking": "".join(thinking) or None,
        "tool_calls": [
            ToolCall(block.id, block.name, dict(block.input))  # type: ignore[arg-type]
            for block in message.content
            if block.type == "tool_use"
        ],
        "stop_reason": _ANTHROPIC_STOP[message.stop_reason or "end_turn"],
        "usage": TokenUsage(
            input_tokens=usage.input_tokens + cache_read + cache_write,
            output_tokens=usage.output_tokens,
            cache_read_input_tokens=cache_read,
            cache_creation_input_tokens=cache_write,
        ),
        # The blocks the API wants back unchanged, exactly as the SDK holds them.
        "content": [block.to_dict() for block in message.content],
    }
