"""Tool results too large for the conversation: what the model sees, and how it reads the rest.

A result longer than ``Limits.max_result_chars`` is stored whole once (the tool call's
record), and the conversation gets ``preview_result``: a notice saying how large it is and
how to read it, then the head and tail of it. The model reads the rest with the built-in
``read_tool_result`` tool, in line ranges, character windows, or the passages that match a
pattern (``read_section``).
"""

from __future__ import annotations

import re

__all__ = [
    "CAPPED_MARK",
    "NOTICE_MARK",
    "PREVIEW_CHARS",
    "PREVIEW_LINES",
    "is_preview",
    "cap_stored",
    "preview_result",
    "read_section",
    "read_window",
]

# How a preview starts: 0.9.1's words, so that a program (or 0.9.1 reading a snapshot of
# ours) that looks for them finds the result shown in part.
NOTICE_MARK = "[Tool result too large ("
# How previews written before 0.9.1's words were taken up start (still in stored runs).
_EARLIER_MARK = "[Tool result too large to show in full"
PREVIEW_LINES = 20
PREVIEW_CHARS = 3_000
_MAX_LINES_PER_READ = 2_000
_MAX_MATCHES = 500
_CONTEXT = 200


CAPPED_MARK = "[harnessx: this tool result was cut to its first"


def cap_stored(content: str, max_stored_chars: int) -> str:
    """``content`` as a run stores it: at most ``max_stored_chars`` characters, the last of
    them, when that is not all of it, a line telling the model what is missing and why. A
    capped text is within the limit, so capping it again (the final result after the raw
    one) changes nothing."""
    if len(content) <= max_stored_chars:
        return content
    line = (
        f"\n\n{CAPPED_MARK} {{kept:,}} of {len(content):,} characters (the agent's "
        "Limits.max_stored_chars); the rest was not kept. Ask the tool for less at a time: a "
        "narrower query, or one part of it.]"
    )
    kept = max(0, max_stored_chars - len(line.format(kept=max_stored_chars)))
    if kept == 0:  # a limit too small for the notice
        return content[:max_stored_chars]
    return content[:kept] + line.format(kept=kept)


def is_preview(content: str) -> bool:
    return content.startswith((NOTICE_MARK, _EARLIER_MARK))


def read_window(max_result_chars: int) -> int:
    """The most characters one read returns: enough to make progress, and under the limit
    so that a read is never cut down again itself."""
    return max(200, min(20_000, max_result_chars - 300))


def preview_result(result_id: str, content: str, max_result_chars: int) -> str:
    """The notice and preview the model gets instead of ``content``."""
    lines = content.splitlines()
    window = read_window(max_result_chars)
    budget = min(PREVIEW_CHARS, max(100, max_result_chars // 2))
    call = f'read_tool_result(result_id="{result_id}"'
    if len(lines) <= PREVIEW_LINES * 2:
        shown = content[:budget]
        body = shown + ("\n[... preview ends here]" if len(shown) < len(content) else "")
        where = f"the first {len(shown):,} characters"
        follow = f"{call}, char_offset={len(shown)}, max_chars={window}) continues after the preview"
    else:
        head = "\n".join(lines[:PREVIEW_LINES])
        tail = "\n".join(lines[-PREVIEW_LINES:])
        hidden = len(lines) - 2 * PREVIEW_LINES
        body = f"{head}\n\n[... {hidden:,} lines not shown ...]\n\n{tail}"
        if len(body) > budget:
            body = body[:budget] + "\n[... preview ends here]"
        where = f"lines 1-{PREVIEW_LINES} and the last {PREVIEW_LINES}"
        follow = (
            f"{call}, offset={PREVIEW_LINES}) continues after the head, up to {window:,} characters a read"
        )
    unit = "line" if len(lines) == 1 else "lines"
    # "Full output saved to:" names where the whole text is, as 0.9.1's notice does (there a
    # file; here the result's record, kept with the conversation).
    return (
        f"{NOTICE_MARK}{len(lines):,} {unit}, {len(content):,} chars). Full output saved to: tool result "
        f'"{result_id}", kept with the conversation]\n'
        f"[Shown below: {where}. Read what you need before relying on it: {call}, "
        f'pattern="<regex>") returns the matching passages; {follow}.]\n\n{body}'
    )


def read_section(
    result_id: str,
    content: str,
    offset: int = 0,
    limit: int = _MAX_LINES_PER_READ,
    *,
    max_chars: int = 0,
    char_offset: int = 0,
    pattern: str = "",
    max_result_chars: int = 12_000,
) -> str:
    """One read of a stored result: ``limit`` lines from line ``offset`` (0-based), at most
    ``max_chars`` characters of them from ``char_offset``; or, with ``pattern``, the
    passages matching it. Each read starts with a header saying what it covers and where
    to continue."""
    window = read_window(max_result_chars)
    cap = window if int(max_chars) <= 0 else max(200, min(int(max_chars), window))
    if pattern:
        return _matches(result_id, content, str(pattern), cap)
    offset = max(int(offset), 0)
    limit = max(min(int(limit), _MAX_LINES_PER_READ), 1)
    char_offset = max(int(char_offset), 0)
    lines = content.splitlines()
    section = lines[offset : offset + limit]
    end = offset + len(section)
    text = "\n".join(section)
    header = f"[{result_id}: lines {offset + 1}-{end} of {len(lines)}]"
    if char_offset or len(text) > cap:
        piece = text[char_offset : char_offset + cap]
        header += f" [characters {char_offset + 1}-{char_offset + len(piece)} of {len(text)} in these lines]"
        if char_offset + len(piece) < len(text):
            header += f" [next: offset={offset}, limit={limit}, char_offset={char_offset + len(piece)}]"
        elif end < len(lines):
            header += f" [next: offset={end}]"
        return f"{header}\n{piece}"
    if end < len(lines):
        header += f" [next: offset={end}]"
    return f"{header}\n{text}"


def _matches(result_id: str, content: str, pattern: str, cap: int) -> str:
    try:
        regex = re.compile(pattern, re.IGNORECASE)
    except re.error:
        regex = re.compile(re.escape(pattern), re.IGNORECASE)
    found = []
    for match in regex.finditer(content):
        if match.end() > match.start():
            found.append(match)
        if len(found) >= _MAX_MATCHES:
            break
    more = "+" if len(found) >= _MAX_MATCHES else ""
    header = f"[{result_id}: {len(found)}{more} matches for {pattern!r} in {len(content):,} characters]"
    if not found:
        return header + "\nNothing matches: try other words, or read the result by lines."
    single_line = "\n" not in content
    parts: list[str] = []
    used = len(header)
    last_end = -1
    for index, match in enumerate(found):
        if match.start() < last_end:
            continue
        start, end = max(0, match.start() - _CONTEXT), min(len(content), match.end() + _CONTEXT)
        if single_line:
            where = f"character {match.start():,} (read on with char_offset={start})"
        else:
            line = content.count("\n", 0, match.start())
            where = f"line {line + 1:,} (read on with offset={line})"
        piece = f"--- at {where}:\n" + " ".join(content[start:end].split())
        if used + len(piece) > cap:
            parts.append(
                f"[... {len(found) - index} more matches: narrow the pattern, or read from a position above]"
            )
            break
        parts.append(piece)
        used += len(piece)
        last_end = end
    return header + "\n" + "\n".join(parts)
