"""Tool results too large for the conversation: what the model sees, and how it reads the rest.

A result longer than ``Limits.max_result_chars`` is stored whole once (the tool call's
record), and the conversation gets ``shown_result`` of it, laid out and worded as harnessx
0.9.1's (the model reads it, and programs written for 0.9.1 look for its words):

- a JSON list of records (search hits, rows) that fits once every record's long strings are
  cut to one length is shown *trimmed*: every record is there, each cut string ends with
  how many characters it lost, under a notice starting ``[Tool result trimmed to fit``;
- anything else is shown as a *preview* under a notice starting ``[Tool result too large (``
  and a line saying what is not shown and how to read it: a list of records too long to
  trim, record by record (its label, link and the opening of its text); a few long lines,
  their first 3,000 characters; many lines, the first and last 20. Under a limit of 3,600 a
  preview is shorter than 0.9.1's (which shows 3,000 characters whatever the limit).

The model reads the rest with the built-in ``read_tool_result`` tool (``read_section``), in
line ranges, character windows, or the passages that match a pattern; the preview names
the call that reads on from where it stopped.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = [
    "CAPPED_MARK",
    "NOTICE_MARK",
    "PREVIEW_CHARS",
    "PREVIEW_LINES",
    "TRIMMED_MARK",
    "cap_stored",
    "is_preview",
    "is_trimmed",
    "preview_result",
    "read_section",
    "read_window",
    "shown_in_part",
    "shown_result",
    "spilled_result",
]

# How a preview starts: 0.9.1's words, so that a program (or 0.9.1 reading a snapshot of
# ours) that looks for them finds the result shown in part.
NOTICE_MARK = "[Tool result too large ("
# How a list of records cut to fit starts (0.9.1's words too).
TRIMMED_MARK = "[Tool result trimmed to fit"
# How previews written before 0.9.1's words were taken up start (still in stored runs).
_EARLIER_MARK = "[Tool result too large to show in full"
# "Full output saved to: <where>]": 0.9.1's notice names a file there; ours the record.
_WHERE = 'tool result "{id}", kept with the conversation'
_SIZE_OF_TRIMMED = re.compile(r"\[Tool result trimmed to fit \(([\d,]+) chars;")
PREVIEW_LINES = 20
# The most a preview shows (0.9.1's figure), and the room left for the notice above it:
# under a limit of 3,600 the preview is shorter (0.9.1's is not), so that what the
# conversation holds stays near the limit.
PREVIEW_CHARS = 3_000
_NOTICE_ROOM = 600
# The shortest a record's string is cut to: shorter, and trimming hides what the records say.
_MIN_TRIM = 300
# Longer JSON is not parsed for records (a preview must stay cheap).
_MAX_JSON_CHARS = 5_000_000
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
    """Whether ``content`` is a preview (this build's, an earlier one's, or 0.9.1's)."""
    return content.startswith((NOTICE_MARK, _EARLIER_MARK))


def is_trimmed(content: str) -> bool:
    """Whether ``content`` is a list of records cut to fit."""
    return content.startswith(TRIMMED_MARK)


def shown_in_part(content: str) -> bool:
    """Whether the conversation holds less than the whole of this result."""
    return is_preview(content) or is_trimmed(content)


def read_window(max_result_chars: int) -> int:
    """The most characters one read returns: enough to make progress, and under the limit
    so that a read is never cut down again itself."""
    return max(200, min(20_000, max_result_chars - 300))


def shown_result(result_id: str, content: str, max_result_chars: int) -> str:
    """What the conversation holds of a result longer than ``max_result_chars``."""
    return _trimmed(result_id, content, max_result_chars) or preview_result(
        result_id, content, max_result_chars
    )


def spilled_result(result_id: str, shown: str, max_result_chars: int) -> str:
    """A preview of what the conversation shows of a result (``shown``), to make room: of
    the result itself, or, for a list of records cut to fit, of the trimmed list, which
    keeps every record's label and opening, with the whole result's size."""
    if not is_trimmed(shown):
        return preview_result(result_id, shown, max_result_chars)
    size = _SIZE_OF_TRIMMED.match(shown)
    body = shown.split("\n\n", 1)[-1]
    whole = int(size.group(1).replace(",", "")) if size else len(body)
    return preview_result(result_id, body, max_result_chars, whole_chars=whole)


# ---------------------------------------------------------------- records


def _records(content: str) -> tuple[Any, list[dict[str, Any]], str, dict[str, Any]] | None:
    """JSON ``content`` that holds a list of records: the parsed value, the records, where
    they are (the top-level list, or the key of the largest such list of an object), and
    the object's other plain fields; None for anything else."""
    head = content.lstrip()[:1]
    if head not in ("[", "{") or len(content) > _MAX_JSON_CHARS:
        return None
    try:
        data = json.loads(content)
    except ValueError:
        return None
    if _is_records(data):
        return data, data, "the top-level list", {}
    if not isinstance(data, dict):
        return None
    key, size = None, -1
    for name, value in data.items():
        if _is_records(value):
            weight = len(json.dumps(value, default=str))
            if weight > size:
                key, size = name, weight
    if key is None:
        return None
    others = {
        name: value
        for name, value in data.items()
        if isinstance(value, str | int | float) and not isinstance(value, bool) and str(value).strip()
    }
    return data, data[key], f'"{key}"', others


def _is_records(value: Any) -> bool:
    # Every item an object (0.9.1 looks at the first fifty, and fails on a later item that
    # is not one).
    return isinstance(value, list) and bool(value) and all(isinstance(item, dict) for item in value)


def _trimmed(result_id: str, content: str, max_result_chars: int) -> str | None:
    """``content``, a list of records, with every record's long strings cut to the one
    length that fits the limit, under a notice; None when it is not records or does not
    fit even at the shortest cut."""
    found = _records(content)
    if found is None:
        return None
    data, records, _, _ = found
    room = max_result_chars - _NOTICE_ROOM

    def cut_to(length: int) -> str:
        cut = [
            {
                key: f"{value[:length]} [... {len(value) - length:,} more characters]"
                if isinstance(value, str) and len(value) > length
                else value
                for key, value in record.items()
            }
            for record in records
        ]
        whole: Any = cut if data is records else {k: cut if v is records else v for k, v in data.items()}
        return json.dumps(whole, ensure_ascii=False, separators=(",", ":"), default=str)

    # The longest cut that fits, by bisection between the shortest allowed and the longest
    # record (no string is longer than its record).
    shortest = _MIN_TRIM
    longest = max(len(json.dumps(record, default=str)) for record in records)
    if len(cut_to(shortest)) > room:
        return None
    while shortest < longest:
        middle = (shortest + longest + 1) // 2
        if len(cut_to(middle)) <= room:
            shortest = middle
        else:
            longest = middle - 1
    call = _call(result_id)
    return (
        f"{TRIMMED_MARK} ({len(content):,} chars; every one of the {len(records)} records is here, "
        f"with any text longer than {shortest:,} characters cut short). Full output saved to: "
        f"{_WHERE.format(id=result_id)}]\n"
        f'[A record marked "more characters" continues in the saved copy: {call}, pattern="<words>") '
        "finds the passage you need. read_file cannot open this location.]\n\n"
        f"{cut_to(shortest)}"
    )


_LABELS = ("title", "name", "id", "key", "path")
_LINKS = ("url", "link", "href", "uri", "source")
_TEXTS = ("content", "text", "snippet", "summary", "description", "body", "message")
# Where a web page's text breaks into fragments: lines, markdown headings, sentence ends.
_FRAGMENTS = re.compile(r"\n+|#{1,6}\s+|(?<=[.!?])\s+(?=[A-Z0-9])")


def _prose(text: str) -> str:
    """``text`` without the fragments that are not sentences (a web page's menus and
    headings, which would fill a record's short opening); all of it when nothing is left."""
    sentences = []
    for fragment in _FRAGMENTS.split(text):
        if len(fragment.split()) >= 6 and any(c.islower() for c in fragment):
            sentences.append(fragment.strip(" |*-"))
    return " ".join(" ".join(sentences).split()) or " ".join(text.split())


def _record_lines(content: str, budget: int) -> tuple[str, int] | None:
    """A list of records shown one by one within ``budget`` characters (its label and
    link, the opening of its text), and how many records there are; None when ``content``
    is not such a list."""
    found = _records(content)
    if found is None:
        return None
    _, records, where, others = found
    out = [f"JSON with {len(records)} records in {where}."]
    if others:
        fields = list(others.items())[:3]
        out.append("Other fields: " + ", ".join(f"{key}: {str(value)[:80]}" for key, value in fields))
    opening = max(80, min(200, (budget - 300) // len(records) - 80))
    for number, record in enumerate(records, 1):
        label = next((str(record[k]) for k in _LABELS if record.get(k) not in (None, "")), "")
        link = next((record[k] for k in _LINKS if isinstance(record.get(k), str) and record[k]), "")
        text = next((record[k] for k in _TEXTS if isinstance(record.get(k), str) and record[k].strip()), None)
        said = _prose(text if text is not None else json.dumps(record, default=str))
        title = " | ".join(part[:120] for part in (label, link) if part) or f"record {number}"
        more = "..." if len(said) > opening else ""
        entry = f"{number}. {title}\n   {said[:opening]}{more}"
        if len("\n".join(out)) + len(entry) > budget:
            out.append(f"... and {len(records) - number + 1} more records")
            break
        out.append(entry)
    return "\n".join(out), len(records)


# ---------------------------------------------------------------- previews


def _call(result_id: str) -> str:
    return f'read_tool_result(result_id="{result_id}"'


def preview_result(
    result_id: str,
    content: str,
    max_result_chars: int,
    *,
    preview_lines: int = PREVIEW_LINES,
    whole_chars: int | None = None,
) -> str:
    """The notice and preview the model gets instead of ``content`` (see the module's
    documentation); ``whole_chars``: the size of the whole result when ``content`` is a
    shorter stand-in for it (a trimmed list of records)."""
    size = len(content) if whole_chars is None else whole_chars
    lines = content.splitlines()
    window = read_window(max_result_chars)
    budget = max(100, min(PREVIEW_CHARS, max_result_chars - _NOTICE_ROOM))
    call = _call(result_id)
    missing = ""
    by_record = _record_lines(content, budget)
    if by_record is not None:
        shown, count = by_record
        missing = f"Not shown: the full text of the {count} records ({size:,} characters of JSON)."
        how = (
            f'{call}, pattern="<words>") finds passages; '
            f"{call}, char_offset=0, max_chars={window}) reads the JSON from the start"
        )
    elif len(lines) <= 2 * preview_lines:
        # A few lines, maybe one very long one (minified JSON, a CSV row): its start, read
        # on by character.
        shown = content[:budget]
        if len(shown) < len(content):
            cut = len(shown)
            shown += "\n... [preview truncated]"
            missing = f"Not shown: characters {cut + 1:,} to {len(content):,}."
            how = (
                f'{call}, pattern="<regex>") finds passages; '
                f"{call}, char_offset={cut}, max_chars={window}) reads on from the preview"
            )
        else:
            how = f"{call})"
    else:
        # Lines (source, logs, listings): the head and the tail, read on by line. Searching
        # is offered first: paging a long listing takes many turns to find one line.
        hidden = len(lines) - 2 * preview_lines
        shown = (
            "\n".join(lines[:preview_lines])
            + f"\n\n... ({hidden} lines omitted) ...\n\n"
            + "\n".join(lines[-preview_lines:])
        )
        if len(shown) > budget:
            shown = shown[:budget] + "\n... [preview truncated]"
        last = len(lines) - preview_lines
        missing = f"Not shown: lines {preview_lines + 1:,} to {last:,} of {len(lines):,}."
        how = (
            f'{call}, pattern="<regex>") finds the lines you need; '
            f"{call}, offset={preview_lines}) reads on from the preview, up to {window:,} characters a read"
        )
    # The share is said whatever the model means to do next: a preview that looks whole is
    # otherwise taken for the whole result.
    share = max(1, round(100 * len(shown) / max(1, size)))
    unit = "line" if len(lines) == 1 else "lines"
    missing = f"{missing} " if missing else ""
    return (
        f"{NOTICE_MARK}{len(lines):,} {unit}, {size:,} chars). Full output saved to: "
        f"{_WHERE.format(id=result_id)}]\n"
        f"[{missing}The preview below is about {share}% of the result. Read the part you need before "
        f"you rely on it or cite it: {how}. read_file cannot open this location.]\n\n"
        f"{shown}"
    )


# ---------------------------------------------------------------- reading


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
        header += f" [characters {char_offset + 1}-{char_offset + len(piece)} of {len(text)} in this section]"
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
        return header + "\nNo matches. Try other words, or read the result in sections."
    single_line = "\n" not in content
    parts: list[str] = []
    used = len(header)
    last_end = -1
    for index, match in enumerate(found):
        if match.start() < last_end:
            continue
        start, end = max(0, match.start() - _CONTEXT), min(len(content), match.end() + _CONTEXT)
        if single_line:
            where = f"character {match.start():,} (continue with char_offset={start})"
        else:
            line = content.count("\n", 0, match.start())
            where = f"line {line + 1:,} (continue with offset={line})"
        piece = f"--- at {where}:\n" + " ".join(content[start:end].split())
        if used + len(piece) > cap:
            parts.append(
                f"... {len(found) - index} more matches; narrow the pattern or read on from a position above"
            )
            break
        parts.append(piece)
        used += len(piece)
        last_end = end
    return header + "\n" + "\n".join(parts)
