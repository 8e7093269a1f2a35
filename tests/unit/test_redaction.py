"""harnessx._redaction: masking secrets in text."""

from __future__ import annotations

import json

import pytest

from harnessx._redaction import Redactor, environment_secrets, redact


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
        # Userinfo typed in by hand: raw / # @ : in the password, or percent-encoded ones.
        ("postgresql://u:Sup3r/Secret@h/db", "postgresql://u:***@h/db"),
        ("postgresql://u:p@ss@h", "postgresql://u:***@h"),
        ("postgresql://u:p#ss@h:5432/db?sslmode=require", "postgresql://u:***@h:5432/db?sslmode=require"),
        ("postgres://u:p:ss@h/db", "postgres://u:***@h/db"),
        ("postgresql://u:p%2Fss%40w%3Ard@h/db", "postgresql://u:***@h/db"),
        ('connect("postgresql://u:a/b@c@h/db", timeout=3)', 'connect("postgresql://u:***@h/db", timeout=3)'),
        ("dsn='postgres://app:x/y#z@db/harness' next", "dsn='postgres://app:***@db/harness' next"),
        # The port-then-@ URL is the price of the above: its middle is masked as well.
        ("http://host:8080/path@x", "http://host:***@x"),
        # libpq's key=value DSNs: unquoted values run to whitespace, quoted ones may escape.
        ("host=db user=app password=Sup3r/Secret dbname=x", "host=db user=app password=*** dbname=x"),
        ("password=ab;cd,ef&gh host=x", "password=*** host=x"),
        ("password='it\\'s a secret' host=h", "password='***' host=h"),
        ("PGPASSWORD=hunter2 psql", "PGPASSWORD=*** psql"),
        ("(password=abc)", "(password=***)"),
        # Things that only look close stay as they are.
        ("input_tokens=12 output_tokens=5", "input_tokens=12 output_tokens=5"),
        ("task-12345678 disk-abcdefghij", "task-12345678 disk-abcdefghij"),
        ("sk-short", "sk-short"),
        ("http://host:8080/path", "http://host:8080/path"),
        ("execution_key=abc", "execution_key=abc"),
        ("password=", "password="),
    ],
)
def test_redact(text: str, expected: str) -> None:
    assert redact(text) == expected
    assert redact(expected) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("token ghp_abcdefghijklmnopqrstuvwxyz0123", "token ***"),
        ("glpat-abcdefghijklmnopqrstu", "***"),
        ("xoxb-1234567890-abcdef", "***"),
        ("id AKIAABCDEFGHIJKLMNOP.", "id ***."),
        ("k=AIzaSyA-abcdefghijklmnopqrstuvwxyz01234", "k=***"),
        ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJvcHMifQ.c2lnbmF0dXJlLXZhbHVl", "jwt ***"),
        ("curl -H 'X: 1' bearer abcdefgh12345678", "curl -H 'X: 1' bearer ***"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----", "***"),
        ("set-cookie: sid=abc", "set-cookie: ***"),
        ("private_key=abc credentials: xyz", "private_key=*** credentials: ***"),
        # Still left alone.
        ("AKIAABCDEFGHIJKLMNOPQ is too long", "AKIAABCDEFGHIJKLMNOPQ is too long"),
        ("the bearer of bad news", "the bearer of bad news"),
        ("max_tokens=100 tokenizer=bpe", "max_tokens=100 tokenizer=bpe"),
    ],
)
def test_redact_token_shapes(text: str, expected: str) -> None:
    assert redact(text) == expected
    assert redact(expected) == expected


def test_a_redactor_redacts_structures_and_leaves_the_original_alone() -> None:
    value = {
        "api_key": "abc",
        "X-Api-Key": "def",
        "max_tokens": 100,
        "usage": {"input_tokens": 5, "output_tokens": 7},
        "password": None,
        "credentials": {"user": "u", "secret": "s"},
        "execution_key": "run:1:call",
        "urls": ["postgresql://u:pw@h/db", "https://example.com/a@b"],
        "literal": "prefix long-literal-secret suffix",
        "tool_output": '{"token": "t0k3n", "rows": [1, 2]}',
        "not_json": "{not json} api_key=zzz",
    }
    snapshot = json.loads(json.dumps(value))
    redacted = Redactor(["long-literal-secret", "short"]).redact(value)
    assert value == snapshot
    assert redacted == {
        "api_key": "[REDACTED]",
        "X-Api-Key": "[REDACTED]",
        "max_tokens": 100,
        "usage": {"input_tokens": 5, "output_tokens": 7},
        "password": None,
        "credentials": "[REDACTED]",
        "execution_key": "run:1:call",
        "urls": ["postgresql://u:[REDACTED]@h/db", "https://example.com/a@b"],
        "literal": "prefix [REDACTED] suffix",
        "tool_output": '{"rows":[1,2],"token":"[REDACTED]"}',
        "not_json": "{not json} api_key=[REDACTED]",
    }
    assert Redactor().redact(redacted) == {**redacted, "literal": "prefix [REDACTED] suffix"}


def test_environment_secrets_are_the_values_of_secret_names_and_dsn_passwords() -> None:
    found = environment_secrets(
        {
            "OPENAI_API_KEY": "sk-live-value-123",
            "GITHUB_TOKEN": "short",
            "HARNESSX_DSN": "postgresql://app:dsn-password-9@db/app",
            "LIBPQ": "host=db password=kw-password-77",
            "HOME": "/root/very-long-home",
        }
    )
    assert found == {"sk-live-value-123", "dsn-password-9", "kw-password-77"}
