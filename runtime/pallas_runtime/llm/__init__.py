"""The LLM boundary: provider-neutral conversation types and the OpenAI / Anthropic adapters."""
