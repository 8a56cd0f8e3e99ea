"""Prices and budgets at run time: what LLM calls cost, who may spend how much (docs/api.md §3)."""
