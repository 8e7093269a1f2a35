"""``ResultSpillExtension``: large tool results go to a file, the model gets a summary and a
``read_result`` tool to query the file (harnessx 0.9.1's extension of that name).

A successful tool result of ``threshold_bytes`` characters or more is written under
``spill_root/<instance id>/`` and replaced by a JSON envelope (``stored: true``, a
``result_id``, its size, and a first look: the first rows of a tabular result, else the
first characters). Tabular means a JSON object with a ``rows`` list (or ``sample.rows``);
its rows are stored one JSON document a line and ``read_result`` answers ``head``,
``tail``, ``count``, ``count_by``, ``sum``, ``avg``, ``min`` and ``max`` over them; any
other result answers ``peek`` and ``search``.

The files are this process's: ``teardown()`` (from ``agent.aclose()``) removes them, and a
durable run resumed in another process cannot read them. ``Limits(max_result_chars)``
with the built-in ``read_tool_result`` keeps a large result inside the run instead.
Unlike 0.9.1, a result over ``max_spill_bytes`` is never replaced by a note that it was
too large (its content would be lost): it is left to the agent's own large-result
handling, which previews it and keeps it whole.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harnessx._extensions import Extension, ExtensionContext
from harnessx._middleware import Middleware
from harnessx._results import ToolResult
from harnessx._tools import PermissionLevel, ReplayPolicy

__all__ = ["ResultSpillExtension"]

_ROW_OPS = ("head", "tail", "count", "count_by", "sum", "avg", "min", "max")
_TEXT_OPS = ("peek", "search")
# A stored row's string values are shortened to this many characters in the envelope.
_INLINE_VALUE_CHARS = 200

_READ_RESULT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "result_id": {"type": "string", "description": "The result_id of a stored tool result."},
        "op": {
            "type": "object",
            "description": (
                "What to read. Tabular results: {kind: head|tail, n?}, {kind: count}, "
                "{kind: count_by, column, top?}, {kind: sum|avg|min|max, column}. Other "
                "results: {kind: peek, bytes?}, {kind: search, needle, around?, max_hits?}."
            ),
            "properties": {
                "kind": {"type": "string", "enum": [*_ROW_OPS, *_TEXT_OPS]},
                "n": {"type": "integer", "minimum": 1, "maximum": 200},
                "column": {"type": "string"},
                "top": {"type": "integer", "minimum": 1, "maximum": 200},
                "bytes": {"type": "integer", "minimum": 1, "maximum": 32000},
                "needle": {"type": "string", "minLength": 1},
                "around": {"type": "integer", "minimum": 0, "maximum": 500},
                "max_hits": {"type": "integer", "minimum": 1, "maximum": 50},
            },
            "required": ["kind"],
        },
    },
    "required": ["result_id", "op"],
}


@dataclass
class SpilledResult:
    """Where one stored result is, and what it holds (``fmt``: jsonl, json or text)."""

    result_id: str
    path: str
    fmt: str
    size_bytes: int
    row_count: int | None = None
    columns: Any = None
    parent_keys: list[str] | None = None


class _Spill(Middleware):
    def __init__(self, extension: ResultSpillExtension) -> None:
        self._extension = extension
        # Calls of read_result itself: its answers are never stored again (the model would
        # get a result_id for every slice it reads).
        self._reads: set[str] = set()

    async def before_tool_execution(self, tool_call: Any) -> Any:
        if getattr(tool_call, "name", None) == "read_result":
            self._reads.add(str(tool_call.id))
        return tool_call

    async def after_tool_execution(self, result: Any) -> Any:
        if not isinstance(result, ToolResult):
            return result
        if result.tool_call_id in self._reads:
            self._reads.discard(result.tool_call_id)
            return result
        return self._extension._maybe_spill(result)


class ResultSpillExtension(Extension):
    """Store tool results of ``threshold_bytes`` characters or more in files and give the
    model ``read_result`` to query them (see the module's documentation)."""

    name = "result_spill"

    def __init__(
        self,
        *,
        threshold_bytes: int = 32_000,
        max_spill_bytes: int = 50_000_000,
        spill_root: str | None = None,
        inline_head_rows: int = 10,
        inline_peek_chars: int = 1000,
    ) -> None:
        self.threshold_bytes = threshold_bytes
        self.max_spill_bytes = max_spill_bytes
        self.inline_head_rows = inline_head_rows
        self.inline_peek_chars = inline_peek_chars
        root = Path(spill_root) if spill_root else Path(tempfile.gettempdir()) / "harnessx-spill"
        # A folder of this instance's own: teardown removes it and nothing else.
        self._folder = root / uuid.uuid4().hex
        self._results: dict[str, SpilledResult] = {}

    def install(self, ctx: ExtensionContext) -> None:
        ctx.add_middleware(_Spill(self))
        ctx.register_tool(
            self._read_result,
            name="read_result",
            description=(
                "Read part of a tool result that was stored because it was large (its reply said "
                "stored: true and gave a result_id): rows and aggregates of a tabular one, a peek "
                "or a text search of any other. Query it instead of calling the tool again."
            ),
            input_schema=_READ_RESULT_SCHEMA,
            permission=PermissionLevel.ALLOW,
            replay_policy=ReplayPolicy.SAFE,
        )

    async def on_save_session(self, ctx: ExtensionContext) -> dict[str, Any]:
        return {"results": {key: asdict(meta) for key, meta in self._results.items()}}

    async def on_load_session(self, ctx: ExtensionContext, state: dict[str, Any]) -> None:
        for key, saved in (state.get("results") or {}).items():
            self._results[key] = SpilledResult(
                result_id=saved["result_id"],
                path=saved["path"],
                fmt=saved["fmt"],
                size_bytes=int(saved.get("size_bytes", 0)),
                row_count=saved.get("row_count"),
                columns=saved.get("columns"),
                parent_keys=saved.get("parent_keys"),
            )

    async def teardown(self) -> None:
        self._results.clear()
        shutil.rmtree(self._folder, ignore_errors=True)

    # ------------------------------------------------------------------ spill

    def _maybe_spill(self, result: ToolResult) -> ToolResult:
        content = result.content or ""
        size = len(content)
        if result.is_error or size < self.threshold_bytes or size > self.max_spill_bytes:
            return result
        try:
            parsed: Any = json.loads(content)
        except ValueError:
            parsed = None
        found = _rows_of(parsed)
        result_id = f"r_{uuid.uuid4()}"
        self._folder.mkdir(parents=True, exist_ok=True)
        envelope: dict[str, Any] = {"stored": True, "result_id": result_id, "size_bytes": size}
        if found is not None:
            rows, columns, parent_keys = found
            path = self._folder / f"{result_id}.jsonl"
            path.write_text("".join(json.dumps(row, default=str) + "\n" for row in rows), encoding="utf-8")
            meta = SpilledResult(result_id, str(path), "jsonl", size, len(rows), columns, parent_keys)
            envelope |= {
                "format": "jsonl",
                "row_count": len(rows),
                "columns": columns,
                "parent_keys": parent_keys,
                "head": [_shortened(row) for row in rows[: self.inline_head_rows]],
                "note": "Rows stored: query them with read_result (head, tail, count, count_by, "
                "sum, avg, min, max) instead of running the tool again.",
            }
        else:
            fmt = "text" if parsed is None else "json"
            path = self._folder / f"{result_id}.{'txt' if parsed is None else 'json'}"
            path.write_text(content if parsed is None else json.dumps(parsed, indent=2), encoding="utf-8")
            meta = SpilledResult(result_id, str(path), fmt, size)
            envelope |= {
                "format": fmt,
                "peek": content[: self.inline_peek_chars],
                "peek_chars": min(self.inline_peek_chars, size),
                "note": "Stored: read more of it with read_result (peek, search).",
            }
        self._results[result_id] = meta
        return ToolResult(result.tool_call_id, json.dumps(envelope, default=str))

    # ------------------------------------------------------------ read_result

    def _read_result(self, result_id: str, op: dict[str, Any]) -> str:
        meta = self._results.get(result_id)
        if meta is None:
            return _error(f"no stored result {result_id!r} in this session")
        kind = op.get("kind")
        tabular = meta.fmt == "jsonl"
        if kind in _ROW_OPS and not tabular:
            return _error(f"{kind!r} needs a tabular result; {result_id!r} is {meta.fmt}: use peek or search")
        if kind in _TEXT_OPS and tabular:
            return _error(f"{kind!r} reads text; {result_id!r} holds rows: use {', '.join(_ROW_OPS)}")
        if kind not in _ROW_OPS and kind not in _TEXT_OPS:
            return _error(f"unknown op kind {kind!r}; one of {', '.join((*_ROW_OPS, *_TEXT_OPS))}")
        base = {"result_id": result_id, "op": kind}
        try:
            answer = self._answer(meta, str(kind), op)
        except KeyError as exc:
            return _error(f"op {kind!r} needs the field {exc.args[0]!r}")
        except (OSError, ValueError, TypeError) as exc:
            return _error(f"read_result failed: {exc}")
        return json.dumps(base | answer, default=str)

    def _answer(self, meta: SpilledResult, kind: str, op: dict[str, Any]) -> dict[str, Any]:
        if kind in ("head", "tail"):
            n = int(op.get("n", 10))
            rows = list(_rows(meta.path))
            return {"n": n, "rows": rows[:n] if kind == "head" else rows[-n:]}
        if kind == "count":
            return {"count": meta.row_count or 0}
        if kind == "count_by":
            column, top = op["column"], int(op.get("top", 50))
            counts = Counter(_bucket(row, column) for row in _rows(meta.path))
            return {
                "column": column,
                "top": top,
                "distinct": len(counts),
                "histogram": [{"value": v, "count": c} for v, c in counts.most_common(top)],
            }
        if kind in ("sum", "avg", "min", "max"):
            column = op["column"]
            values = (row.get(column) if isinstance(row, dict) else None for row in _rows(meta.path))
            numbers = [x for x in map(_number, values) if x is not None]
            value: float | None = None
            if kind == "sum":
                value = math.fsum(numbers)
            elif numbers and kind == "avg":
                value = math.fsum(numbers) / len(numbers)
            elif numbers:
                value = min(numbers) if kind == "min" else max(numbers)
            return {"column": column, "numeric_rows": len(numbers), "value": value}
        text = Path(meta.path).read_text(encoding="utf-8")
        if kind == "peek":
            size = int(op.get("bytes", 2000))
            return {"bytes": size, "total_chars": len(text), "text": text[:size]}
        needle, around, most = op["needle"], int(op.get("around", 80)), int(op.get("max_hits", 10))
        hits: list[dict[str, Any]] = []
        at = text.find(needle)
        while at != -1 and len(hits) < most:
            hits.append({"offset": at, "context": text[max(0, at - around) : at + len(needle) + around]})
            at = text.find(needle, at + len(needle))
        return {"needle": needle, "around": around, "hits": hits, "truncated": len(hits) == most}


def _error(message: str) -> str:
    return json.dumps({"error": message})


def _rows_of(parsed: Any) -> tuple[list[Any], Any, list[str]] | None:
    """A tabular result's rows, columns and the other keys of the object holding them."""
    if not isinstance(parsed, dict):
        return None
    if isinstance(parsed.get("rows"), list):
        return parsed["rows"], parsed.get("columns"), [k for k in parsed if k != "rows"]
    sample = parsed.get("sample")
    if isinstance(sample, dict) and isinstance(sample.get("rows"), list):
        return sample["rows"], sample.get("columns"), ["sample", *(k for k in parsed if k != "sample")]
    return None


def _shortened(row: Any) -> Any:
    if not isinstance(row, dict):
        return row
    return {
        key: value[:_INLINE_VALUE_CHARS] + f"…[+{len(value) - _INLINE_VALUE_CHARS}]"
        if isinstance(value, str) and len(value) > _INLINE_VALUE_CHARS
        else value
        for key, value in row.items()
    }


def _rows(path: str) -> Iterator[Any]:
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


def _bucket(row: Any, column: str) -> str:
    if not isinstance(row, dict) or column not in row:
        return "<missing>"
    value = row[column]
    return "<null>" if value is None else str(value)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None
