"""A run's conversation kept within the model's context window (the driver's side of
``_condense``).

Before a model call, with ``Limits.max_context_tokens`` set, the request is counted by
the provider (``count_tokens``); when it would not leave room for the reply, the older
part of the conversation is summarized by the model and shown condensed from then on
(``HookEvent.CONTEXT_CONDENSED``). A summary call that fails is retried under the run's
``RetryPolicy`` (``RETRY`` hooks, ``kind="model"``); once the attempts are spent a plain
digest stands in for it, so the run goes on.

A request the provider refuses as too long for the window is recovered, as harnessx 0.9.1
does (``RECOVERY`` hooks): condensed (``context_overflow``), else its large tool results
are shown as previews (``context_overflow_spill``), twice at most in a run; a short request
refused all the same is asked once more (``spurious_overflow``); otherwise the run fails
with ``ContextOverflowError``. The window a refusal names is remembered for the model.

A condensation is a committed message (see ``_condense``), so a resumed run shows the
conversation as it was condensed. On Temporal the model activity runs these with a
committer that records what they commit; the workflow commits it from the activity's
result (``harnessx.temporal._activities``), so its history holds every condensation.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from harnessx._condense import (
    MAX_CONDENSATIONS,
    MAX_OVERFLOW_RECOVERIES,
    SUMMARY_MAX_TOKENS,
    SUMMARY_SYSTEM,
    clearly_within,
    condensation,
    condensations,
    cut_point,
    over_budget,
    overflow_recoveries,
    plain_summary,
    render_for_summary,
    replaced_count,
    spill,
    summary_prompt,
    view,
)
from harnessx._context_fit import estimated_tokens, fit_context
from harnessx._errors import ContextOverflowError, LeaseLostError, StorageError
from harnessx._hooks import HookEvent
from harnessx._messages import request_messages, to_blocks
from harnessx._middleware import ModelRequest
from harnessx._model_limits import context_window_from_error, learn_model_limits, resolve_model_limits
from harnessx._retry import is_context_overflow, retry_after
from harnessx._state import Delta, RunPatch, RunState
from harnessx.providers._base import ProviderResponse, TokenUsage, call_create

if TYPE_CHECKING:
    from harnessx._driver import Driver

__all__ = ["condense_if_due", "is_context_overflow", "recover_overflow"]

logger = logging.getLogger("harnessx.driver")


def _since_last_reply(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "assistant":
            return messages[index + 1 :]
    return messages


def _own(state: RunState) -> list[dict[str, object]]:
    return state.messages[state.history_length :]


async def condense_if_due(driver: Driver, state: RunState) -> None:
    """Condense before the next model call if the request would not leave the reply its
    room in the window (``Limits.max_context_tokens``, else the model's), as 0.9.1: counted
    by the provider unless it is clearly within it."""
    provider = driver.known_provider()
    if provider is None or condensations(_own(state)) >= MAX_CONDENSATIONS:
        return  # (without a provider the model call fails the run, saying why)
    limits = driver.settings.limits
    window = (limits.max_context_tokens if limits is not None else None) or (
        await resolve_model_limits(provider, driver.settings.model)
    ).context_window
    reply = await driver.reply_tokens(state)
    # Counting is a request to the vendor on Anthropic: skipped while the last request's
    # measured size, plus what came after its reply, is well within the window.
    if driver.last_measured:
        estimate = driver.last_measured + estimated_tokens(_since_last_reply(state.messages))
        if clearly_within(estimate, window, reply):
            driver.counted_tokens = estimate
            return
    blocks = to_blocks(view(state.messages))
    if len(blocks) < 6:
        return
    system, offered = driver.request_frame(state)
    # Counted as it would be sent: old tool results cleared first (fit_context), so that
    # the conversation is summarized only when clearing them is not enough.
    fitted = fit_context(view(state.messages), driver.context_room(reply), system, offered)
    messages = request_messages(to_blocks(fitted))
    try:
        counted: int | None = int(
            await provider.count_tokens(
                model=driver.settings.model, messages=messages, system=system, tools=offered
            )
        )
    except Exception:
        logger.info("count_tokens failed for run %s; condensing rather than risk an overflow", state.run_id)
        counted = None
    if over_budget(counted, window, reply) and cut_point(blocks):
        await condense(driver, state, forced=False)
    else:
        # The request as counted: the reply budget is fitted into what it leaves.
        driver.counted_tokens = counted


async def condense(driver: Driver, state: RunState, *, forced: bool) -> bool:
    """Summarize the older part of the conversation and show it condensed from now on;
    False if there is no place to cut."""
    blocks = to_blocks(view(state.messages))
    split = cut_point(blocks)
    if not split:
        return False
    dropped = blocks[:split]
    summary, usage = await _summary(driver, state, dropped)
    summarized = bool(summary)
    message = condensation(
        summary or plain_summary(dropped), replaced_count(blocks, split), summarized=summarized, forced=forced
    )
    await driver.commit(
        state, Delta(state.phase, messages=[message], run=RunPatch(usage=state.usage + usage))
    )
    await driver.hook(
        HookEvent.CONTEXT_CONDENSED,
        messages_dropped=len(dropped),
        summary_chars=len(summary),
        summarized=summarized,
    )
    return True


async def _summary(
    driver: Driver, state: RunState, dropped: list[dict[str, object]]
) -> tuple[str, TokenUsage]:
    """The model's summary of ``dropped`` and what it cost; ``""`` once the run's
    ``RetryPolicy`` attempts are spent (the caller makes do without)."""
    transcript = render_for_summary(dropped)
    if not transcript.strip():
        return "", TokenUsage()
    settings = driver.settings
    retry = settings.retry
    budget = min(SUMMARY_MAX_TOKENS, await driver.reply_tokens(state))
    provider = driver.provider()
    attempt = 1
    while True:
        try:
            # Not streamed, and not through the run's middleware: it is not the run's own call.
            call = call_create(
                provider,
                model=settings.model,
                messages=summary_prompt(transcript),
                system=SUMMARY_SYSTEM,
                tools=[],
                max_tokens=budget,
                temperature=settings.temperature,
            )
            async with asyncio.timeout(retry.effective_call_timeout(budget)):
                response: ProviderResponse = await driver.cancellable(call)
            return (response.text or "").strip(), response.usage or TokenUsage()
        except (LeaseLostError, StorageError):
            raise
        except Exception as exc:
            if driver.is_cancel(exc):
                raise
            if attempt >= retry.attempts:
                logger.warning(
                    "history summary for run %s failed after %d attempt(s) (%s); condensing without it",
                    state.run_id,
                    attempt,
                    exc,
                )
                return "", TokenUsage()
            wait = retry.wait_for(attempt, retry_after(exc, provider))
            await driver.hook(
                HookEvent.RETRY,
                kind="model",
                name=settings.model,
                attempt=attempt,
                next_attempt=attempt + 1,
                wait_seconds=wait,
                error=str(exc),
                provider=getattr(provider, "name", type(provider).__name__),
            )
            attempt += 1
            if wait:
                await driver.cancellable(driver.sleep(wait))


async def recover_overflow(
    driver: Driver, state: RunState, exc: BaseException, request: ModelRequest
) -> bool:
    """Make room after ``exc`` refused ``request`` as too long: True when the model is to
    be asked again; ``ContextOverflowError`` when nothing can make it fit."""
    provider = driver.provider()
    window = context_window_from_error(exc)
    if window:
        learn_model_limits(request.model, provider=provider, context_window=window)
    done = overflow_recoveries(_own(state))
    limits = driver.settings.limits
    if done < MAX_OVERFLOW_RECOVERIES:
        blocks = to_blocks(view(state.messages))
        if cut_point(blocks):
            await driver.hook(
                HookEvent.RECOVERY,
                reason="context_overflow",
                attempt=done + 1,
                reply_budget=request.max_tokens,
            )
            return await condense(driver, state, forced=True)
        shown = view(state.messages)
        spilled = spill(max_result_chars=limits.max_result_chars if limits is not None else None)
        if view([*state.messages, spilled]) != shown:
            await driver.hook(
                HookEvent.RECOVERY,
                reason="context_overflow_spill",
                attempt=done + 1,
                reply_budget=request.max_tokens,
            )
            await driver.commit(state, Delta(state.phase, messages=[spilled]))
            return True
    size = (limits.max_context_tokens if limits is not None else None) or (
        await resolve_model_limits(provider, request.model)
    ).context_window
    estimated = estimated_tokens(request.messages, request.system or "", request.tools)
    if not driver.overflow_retried and size and estimated * 4 < size:
        # Far below the window by any count: a refusal that is not about this request
        # (seen from a vendor under load). Asked once more in a run.
        driver.overflow_retried = True
        await driver.hook(
            HookEvent.RECOVERY, reason="spurious_overflow", attempt=1, reply_budget=request.max_tokens
        )
        return True
    raise ContextOverflowError(
        f"Context overflow: {exc} (about {estimated} tokens estimated against a {size}-token window; "
        "nothing left to condense)",
        estimated_tokens=estimated,
        context_window=size,
    ) from exc
