"""Token usage and dollars: a price table per 1M tokens and usage totals per stage.

Prices are list prices in USD per 1M input (prompt) and output (completion) tokens. The table
below is a starting point, not a source of truth: providers change prices, so a run passes its
own (``--price-in/--price-out`` or ``prices:`` in the YAML config) and records what it used.
Models not in the table (local folders, self-hosted vLLM) cost 0.
"""

from __future__ import annotations

from dataclasses import dataclass

# USD per 1M tokens (input, output); OpenAI list prices at the time of writing.
DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
}


def price_for(model: str, table: dict[str, tuple[float, float]] | None = None) -> tuple[float, float]:
    """(input, output) USD per 1M tokens for ``model``; an exact name first, then the longest
    table entry the name starts with (``gpt-4o-2024-08-06`` is priced as ``gpt-4o``)."""
    table = DEFAULT_PRICES if table is None else table
    if model in table:
        return tuple(table[model])
    prefixes = [name for name in table if model.startswith(name)]
    return tuple(table[max(prefixes, key=len)]) if prefixes else (0.0, 0.0)


def cost_usd(prompt_tokens: int, completion_tokens: int, price: tuple[float, float]) -> float:
    return (prompt_tokens * price[0] + completion_tokens * price[1]) / 1_000_000


@dataclass(slots=True)
class UsageTotals:
    """What one stage's model calls used.

    Tokens count every answer the stage received, cached or not (so per-call averages compare
    with the paper's); ``cost_usd`` is what this run paid, ``cached_cost_usd`` what the cache
    saved. ``failed`` calls are infrastructure failures (no answer), never model answers."""

    calls: int = 0
    cached: int = 0
    failed: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cached_cost_usd: float = 0.0

    def add(self, result) -> None:
        """Count one ``ChatResult``."""
        self.calls += 1
        self.retries += max(result.attempts - 1, 0)
        if result.infra_error is not None:
            self.failed += 1
            return
        self.prompt_tokens += result.prompt_tokens
        self.completion_tokens += result.completion_tokens
        if result.cached:
            self.cached += 1
            self.cached_cost_usd += result.cost_usd
        else:
            self.cost_usd += result.cost_usd

    def as_dict(self) -> dict:
        """For a stage's ``stats.json`` entry (``stats.extra["llm"] = totals.as_dict()``)."""
        answered = self.calls - self.failed
        return {"calls": self.calls, "cached": self.cached, "failed": self.failed, "retries": self.retries,
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "prompt_tokens_per_call": round(self.prompt_tokens / answered, 1) if answered else 0.0,
                "completion_tokens_per_call": round(self.completion_tokens / answered, 1) if answered else 0.0,
                "cost_usd": round(self.cost_usd, 6), "cached_cost_usd": round(self.cached_cost_usd, 6)}
