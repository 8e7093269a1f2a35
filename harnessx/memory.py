"""The original harnessx's ``harnessx.memory``: the conversation and its snapshots."""

from __future__ import annotations

from harnessx._large_results import TRIMMED_MARK
from harnessx._memory import CLEARED_TOOL_RESULT, DEFAULT_MAX_RESULT_CHARS, ConversationMemory
from harnessx._sessions import PersistentMemory

__all__ = ["CLEARED_TOOL_RESULT", "DEFAULT_MAX_RESULT_CHARS", "ConversationMemory", "PersistentMemory"]

# How a list of records cut to fit starts: 0.9.1's private name, which its tests import.
_FITTED = TRIMMED_MARK
