"""Prices, budgets and their windows: the models users write and the arithmetic on them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from pallas_api.spec import PallasAgentSpec, PallasDeploymentSpec
from pallas_api.spending import BudgetConfig, BudgetsSpec, ModelPrice, format_cost, window_end, window_start


def deployment(**fields: Any) -> PallasDeploymentSpec:
    return PallasDeploymentSpec.model_validate(
        {"model": {"default": "openai.gpt"}, "providers": {"openai": {"type": "openai"}}, **fields}
    )


def test_a_price_turns_tokens_into_millionths_rounded_up() -> None:
    price = ModelPrice(input=2.5, output=10, cached_input=1.25)
    # 1000 x 2.5 + 100 x 10 + 400 x 1.25 = 4000 micros
    assert price.micros(1000, 100, 400) == 4000
    assert ModelPrice(input=0.15, output=0.6).micros(1, 0, 0) == 1  # 0.15 micros costs 1
    assert ModelPrice(input=3, output=15).micros(0, 0, 10) == 30  # cached at the input price


def test_prices_sit_on_the_models_of_the_deployment() -> None:
    spec = deployment(
        model={
            "default": "openai.gpt",
            "capabilities": {"price": {"input": 2.5, "output": 10}},
            "models": {"openai.mini": {"price": {"input": 0.15, "output": 0.6, "cachedInput": 0.075}}},
        }
    )
    assert spec.model.capabilities_of("openai.gpt").price == ModelPrice(input=2.5, output=10)
    mini = spec.model.capabilities_of("openai.mini").price
    assert mini is not None
    assert mini.cached_input == 0.075
    assert spec.model.capabilities_of("openai.other").price is None


@pytest.mark.parametrize(
    ("budgets", "problem"),
    [
        ({"agent": {"window": "day"}}, "a budget of window 'day' needs tokens, cost or both"),
        ({"perCaller": {"window": "week", "tokens": 5}}, "window"),
        ({"perCaller": {"window": "hour", "tokens": 0}}, "greater than 0"),
        ({"warnAt": 1}, "less than 1"),
        ({"agent": {"window": "day", "cost": -1}}, "greater than 0"),
        ({"perAgent": {"window": "day", "tokens": 1}}, "Extra inputs are not permitted"),
    ],
)
def test_bad_budgets_are_refused_with_what_is_wrong(budgets: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        deployment(budgets=budgets)


def test_an_agent_overrides_the_deployments_budgets_field_by_field() -> None:
    base = BudgetsSpec.model_validate(
        {
            "agent": {"window": "month", "cost": 100},
            "perCaller": {"window": "day", "tokens": 1000},
            "warnAt": 0.5,
        }
    )
    agent = PallasAgentSpec.model_validate(
        {"deployment": "d", "budgets": {"perCaller": {"window": "hour", "tokens": 10}}}
    ).budgets
    merged = BudgetConfig.merged(base, agent)
    assert merged.agent is not None
    assert merged.agent.cost == 100
    assert merged.per_caller is not None
    assert (merged.per_caller.window, merged.per_caller.tokens) == (
        "hour",
        10,
    )
    assert merged.warn_at == 0.5
    assert merged.caller_metrics is False
    assert BudgetConfig.merged(BudgetsSpec(), BudgetsSpec()) == BudgetConfig()
    assert not BudgetConfig().limited
    assert merged.limited


@pytest.mark.parametrize(
    ("window", "now", "start", "end"),
    [
        ("hour", datetime(2026, 11, 28, 19, 59, 59, tzinfo=UTC), datetime(2026, 11, 28, 19, tzinfo=UTC),
         datetime(2026, 11, 28, 20, tzinfo=UTC)),
        ("day", datetime(2026, 11, 28, 23, 59, tzinfo=UTC), datetime(2026, 11, 28, tzinfo=UTC),
         datetime(2026, 11, 29, tzinfo=UTC)),
        ("month", datetime(2026, 12, 31, 23, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC),
         datetime(2027, 1, 1, tzinfo=UTC)),
        ("month", datetime(2026, 2, 14, tzinfo=UTC), datetime(2026, 2, 1, tzinfo=UTC),
         datetime(2026, 3, 1, tzinfo=UTC)),
    ],
)  # fmt: skip
def test_windows_follow_the_utc_clock(window: Any, now: datetime, start: datetime, end: datetime) -> None:
    assert window_start(window, now) == start
    assert window_end(window, start) == end


def test_costs_read_as_plain_numbers() -> None:
    assert format_cost(4000) == "0.004"
    assert format_cost(2_500_000) == "2.5"
    assert format_cost(0) == "0"
