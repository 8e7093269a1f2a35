"""The original harnessx's ``harnessx.memory``: the conversation and its snapshots.

It also offers what 0.9.1's module imported from elsewhere, which programs import from it too.
"""

from __future__ import annotations

from harnessx._large_results import PREVIEW_LINES, TRIMMED_MARK
from harnessx._memory import CLEARED_TOOL_RESULT, DEFAULT_MAX_RESULT_CHARS, ConversationMemory
from harnessx._messages import Message
from harnessx._sessions import PersistentMemory, SessionState
from harnessx.providers._base import TokenUsage

__all__ = [
    "DEFAULT_PREVIEW_LINES",
    "CLEARED_TOOL_RESULT",
    "DEFAULT_MAX_RESULT_CHARS",
    "ConversationMemory",
    "Message",
    "PersistentMemory",
    "SessionState",
    "TokenUsage",
]

# How a list of records cut to fit starts: 0.9.1's private name, which its tests import.
_FITTED = TRIMMED_MARK

# 0.9.1's name: how many lines from each end a preview of a long result shows.
DEFAULT_PREVIEW_LINES = PREVIEW_LINES
