"""The agent: its loop (LLM ↔ tools), conversation store and progress reporting."""
