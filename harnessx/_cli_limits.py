"""``harnessx limits``: the pool's scheduling limits, kept in the store and obeyed by every
worker's claim (see docs/scheduling.md).

- ``set KEY N`` / ``remove KEY``: at most N runs of a concurrency key drive at once; KEY may
  end in ``*`` (each key it matches gets N) or be ``agent:NAME@VERSION`` (an agent's runs).
- ``weight TENANT W``: a tenant's fair share (2 gets twice the claims of 1 while both wait).
- ``rate BUCKET --rpm N --tpm N`` / ``rate BUCKET --off``: every worker together starts at
  most N model calls (of N tokens) a minute in a ``provider/model`` bucket.
- ``list``: every limit with what it holds back now, and the tenants that wait.
"""

from __future__ import annotations

import json

import click

from harnessx._cli_common import opened_store, run_command
from harnessx._errors import ConfigurationError
from harnessx._processes import store_options
from harnessx.store._scheduling import check_max_running, check_pattern, check_rate, check_weight

__all__ = ["limits"]


@click.group()
def limits() -> None:
    """Concurrency limits and fair-share weights of the worker pool, shared by every worker."""


def _pattern(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        return check_pattern(value, "key")
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def _max_running(ctx: click.Context, param: click.Parameter, value: int) -> int:
    try:
        return check_max_running(value)
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def _weight(ctx: click.Context, param: click.Parameter, value: float) -> float:
    try:
        return check_weight(value)
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


@limits.command("set")
@click.argument("key", callback=_pattern)
@click.argument("max_running", metavar="N", type=int, callback=_max_running)
@store_options
def set_limit(key: str, max_running: int, sqlite_path: str, dsn: str | None, schema: str) -> None:
    """At most N runs of KEY drive at once, across every worker (0: none; the key waits).

    KEY is a concurrency key ('tenant:42'), a prefix ending in '*' ('tenant:*': each key it
    matches gets N; '*' alone: every key) or 'agent:NAME@VERSION' (all runs of that agent,
    replacing what its registry says). An exact key wins over a pattern, a longer pattern
    over a shorter one."""

    async def go() -> None:
        async with opened_store(sqlite_path, dsn, schema, auto_migrate=False) as store:
            await store.set_concurrency_limit(key, max_running)
        click.echo(f"at most {max_running} runs of {key} drive at once")

    run_command(go())


@limits.command("remove")
@click.argument("key")
@store_options
def remove_limit(key: str, sqlite_path: str, dsn: str | None, schema: str) -> None:
    """Remove the limit set on KEY (a registry's limit on an agent applies again)."""

    async def go() -> bool:
        async with opened_store(sqlite_path, dsn, schema, auto_migrate=False) as store:
            return await store.remove_concurrency_limit(key)

    if not run_command(go()):
        raise click.ClickException(f"no limit is set on {key!r}: 'harnessx limits list' shows those that are")
    click.echo(f"removed the limit on {key}")


@limits.command("weight")
@click.argument("tenant")
@click.argument("weight", type=float, callback=_weight)
@store_options
def set_weight(tenant: str, weight: float, sqlite_path: str, dsn: str | None, schema: str) -> None:
    """Give TENANT a fair-share WEIGHT (default 1): while tenants wait, each is claimed for in
    proportion to its weight."""

    async def go() -> None:
        async with opened_store(sqlite_path, dsn, schema, auto_migrate=False) as store:
            await store.set_tenant_weight(tenant, weight)
        click.echo(f"tenant {tenant} has weight {weight:g}")

    run_command(go())


@limits.command("rate")
@click.argument("bucket", callback=_pattern)
@click.option("--rpm", type=float, help="Model calls per minute, across every worker.")
@click.option(
    "--tpm", type=float, help="Tokens per minute (what calls are expected to use, settled by what they used)."
)
@click.option(
    "--burst",
    type=float,
    default=0.0,
    show_default=True,
    help="Seconds of the rate that may start at once after a quiet spell.",
)
@click.option("--off", is_flag=True, help="Remove the rate limit on BUCKET.")
@store_options
def set_rate(
    bucket: str,
    rpm: float | None,
    tpm: float | None,
    burst: float,
    off: bool,
    sqlite_path: str,
    dsn: str | None,
    schema: str,
) -> None:
    """Every worker together starts at most --rpm model calls and --tpm tokens a minute in
    BUCKET: PROVIDER/MODEL ('openai/gpt-4o', 'anthropic/claude-sonnet-4-5'), or a prefix
    ending in '*' ('openai/*': each model gets that rate). A run waiting for the budget
    holds no request open to the vendor."""
    if off:
        if rpm is not None or tpm is not None:
            raise click.UsageError("--off removes the rate limit: give it without --rpm or --tpm")

        async def remove() -> bool:
            async with opened_store(sqlite_path, dsn, schema, auto_migrate=False) as store:
                return await store.remove_rate_limit(bucket)

        if not run_command(remove()):
            raise click.ClickException(
                f"no rate limit is set on {bucket!r}: 'harnessx limits list' shows those that are"
            )
        click.echo(f"removed the rate limit on {bucket}")
        return
    try:
        rpm, tpm, burst = check_rate(rpm, tpm, burst)
    except ConfigurationError as exc:
        raise click.UsageError(str(exc)) from None

    async def go() -> None:
        async with opened_store(sqlite_path, dsn, schema, auto_migrate=False) as store:
            await store.set_rate_limit(bucket, rpm, tpm, burst)

    run_command(go())
    said = [
        f"{rate:g} {what} a minute" for rate, what in ((rpm, "calls"), (tpm, "tokens")) if rate is not None
    ]
    click.echo(f"at most {' and '.join(said)} in {bucket}, across every worker")


@limits.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per limit and tenant.")
@store_options
def list_limits(as_json: bool, sqlite_path: str, dsn: str | None, schema: str) -> None:
    """Every concurrency limit (runs driving and queued under it) and the tenants that wait."""

    async def go() -> None:
        async with opened_store(sqlite_path, dsn, schema, read_only=True) as store:
            found = await store.concurrency_limits()
            shares = [s for s in await store.tenant_shares() if s.tenant and (s.queued or s.weight != 1)]
            rates = await store.rate_limits()
            buckets = await store.rate_buckets()
        if as_json:
            for rate in rates:
                click.echo(
                    json.dumps(
                        {
                            "kind": "rate",
                            "pattern": rate.pattern,
                            "requests_per_minute": rate.requests_per_minute,
                            "tokens_per_minute": rate.tokens_per_minute,
                            "burst_seconds": rate.burst_seconds,
                        }
                    )
                )
            for bucket in buckets:
                entry: dict[str, object] = {
                    "kind": "bucket",
                    "bucket": bucket.name,
                    "pattern": bucket.pattern,
                }
                entry.update(waits=bucket.waits, waited_seconds=round(bucket.waited, 3))
                click.echo(json.dumps(entry))
            for limit in found:
                row = {"kind": "concurrency", "pattern": limit.pattern, "max_running": limit.max_running}
                click.echo(
                    json.dumps(
                        {**row, "source": limit.source, "driving": limit.driving, "queued": limit.queued}
                    )
                )
            for share in shares:
                click.echo(
                    json.dumps(
                        {
                            "kind": "tenant",
                            "tenant": share.tenant,
                            "weight": share.weight,
                            "queued": share.queued,
                        }
                    )
                )
            return
        if not found:
            click.echo("no concurrency limits")
        else:
            click.echo(f"{'KEY':<40} {'MAX':>6} {'DRIVING':>8} {'QUEUED':>8}  SOURCE")
            for limit in found:
                driving = "-" if limit.driving is None else str(limit.driving)
                queued = "-" if limit.queued is None else str(limit.queued)
                click.echo(
                    f"{limit.pattern:<40} {limit.max_running:>6} {driving:>8} {queued:>8}  {limit.source}"
                )
        if shares:
            click.echo("")
            click.echo(f"{'TENANT':<40} {'WEIGHT':>6} {'QUEUED':>8}")
            for share in shares:
                click.echo(f"{share.tenant:<40} {share.weight:>6g} {share.queued:>8}")
        if rates:
            click.echo("")
            click.echo(f"{'MODEL RATE':<40} {'RPM':>8} {'TPM':>10} {'BURST':>6}")
            for rate in rates:
                rpm = "-" if rate.requests_per_minute is None else f"{rate.requests_per_minute:g}"
                tpm = "-" if rate.tokens_per_minute is None else f"{rate.tokens_per_minute:g}"
                click.echo(f"{rate.pattern:<40} {rpm:>8} {tpm:>10} {rate.burst_seconds:>5g}s")
        waited = [bucket for bucket in buckets if bucket.pattern is not None]
        if waited:
            click.echo("")
            click.echo(f"{'BUCKET':<40} {'WAITS':>8} {'WAITED':>10}  LIMIT")
            for bucket in waited:
                click.echo(f"{bucket.name:<40} {bucket.waits:>8} {bucket.waited:>9.1f}s  {bucket.pattern}")

    run_command(go())
