"""The original harnessx's ``harnessx.memory``: the conversation and its snapshots."""

from __future__ import annotations

from harnessx._memory import CLEARED_TOOL_RESULT, DEFAULT_MAX_RESULT_CHARS, ConversationMemory
from harnessx._sessions import PersistentMemory

__all__ = ["CLEARED_TOOL_RESULT", "DEFAULT_MAX_RESULT_CHARS", "ConversationMemory", "PersistentMemory"]
