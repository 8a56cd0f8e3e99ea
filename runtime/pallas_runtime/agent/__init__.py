"""The agent: its loop (LLM ↔ tools), health, progress reporting and the history window (conversations are in `pallas_runtime.conversations`)."""
