"""harnessx._redaction: masking secrets in text."""

from __future__ import annotations

import pytest

from harnessx._redaction import redact


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("postgresql://user:secret@host/db", "postgresql://user:***@host/db"),
        ("redis://:pw@localhost:6379/0", "redis://:***@localhost:6379/0"),
        ("password=hunter2 host=db", "password=*** host=db"),
        ("PASSWORD = hunter2", "PASSWORD = ***"),
        ('{"api_key": "sk-abc", "model": "m"}', '{"api_key": "***", "model": "m"}'),
        ("{'apikey': 'x y z'}", "{'apikey': '***'}"),
        ("?a=1&access_token=abc&b=2", "?a=1&access_token=***&b=2"),
        ("Authorization: Bearer abc.def", "Authorization: Bearer ***"),
        ("x-api-key: k1; next", "x-api-key: ***; next"),
        ("client_secret=abc, other=1", "client_secret=***, other=1"),
        ("apiKey=q secretKey: w", "apiKey=*** secretKey: ***"),
        ("key sk-ant-api03-abcdefgh", "key sk-***"),
        # Things that only look close stay as they are.
        ("input_tokens=12 output_tokens=5", "input_tokens=12 output_tokens=5"),
        ("task-12345678 disk-abcdefghij", "task-12345678 disk-abcdefghij"),
        ("sk-short", "sk-short"),
        ("http://host:8080/path@x", "http://host:8080/path@x"),
        ("execution_key=abc", "execution_key=abc"),
        ("password=", "password="),
    ],
)
def test_redact(text: str, expected: str) -> None:
    assert redact(text) == expected
    assert redact(expected) == expected
