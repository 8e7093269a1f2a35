"""The original harnessx's ``harnessx.models``: the model limits registry."""

from __future__ import annotations

from harnessx._model_limits import _BUILTIN as _BUILTIN
from harnessx._model_limits import (
    CONTEXT_SAFETY_TOKENS,
    DEFAULT_OUTPUT_CAP,
    UNKNOWN_MODEL,
    ModelLimits,
    context_window_from_error,
    default_reply_budget,
    learn_model_limits,
    lookup_model_limits,
    normalize_model_id,
    provider_reply_default,
    register_model_limits,
    reply_limit_from_error,
    resolve_model_limits,
)
from harnessx._model_limits import _learned as _learned
from harnessx._model_limits import _registered as _registered

__all__ = [
    "CONTEXT_SAFETY_TOKENS",
    "DEFAULT_OUTPUT_CAP",
    "UNKNOWN_MODEL",
    "ModelLimits",
    "context_window_from_error",
    "default_reply_budget",
    "learn_model_limits",
    "lookup_model_limits",
    "normalize_model_id",
    "provider_reply_default",
    "register_model_limits",
    "reply_limit_from_error",
    "resolve_model_limits",
]
