"""A turn's usage as a client reads it (the task's `metadata.usage`, the final update's)."""

from __future__ import annotations

from agent.events import TurnCompleted, TurnFailed


def usage_metadata(event: TurnCompleted | TurnFailed) -> dict[str, object]:
    """Tokens and calls; reasoning and cache tokens, the model and the cost where known."""
    usage: dict[str, object] = {
        "promptTokens": event.usage.prompt_tokens,
        "completionTokens": event.usage.completion_tokens,
        "llmCalls": event.llm_calls,
        "toolCalls": event.tool_calls,
    }
    details = {
        "reasoningTokens": event.usage.reasoning_tokens,
        "cacheReadTokens": event.usage.cache_read_tokens,
        "cacheWriteTokens": event.usage.cache_write_tokens,
    }
    usage.update((key, count) for key, count in details.items() if count)  # where reported
    if event.usage.model is not None:
        usage["model"] = event.usage.model
    if event.usage.cost_usd is not None:  # no price known: no cost, never a made-up 0
        usage["costUsd"] = round(event.usage.cost_usd, 10)
    return usage
