"""The agent: its loop (LLM ↔ tools), health, progress and the history window.

Conversations are kept by `pallas_runtime.conversations`.
"""
