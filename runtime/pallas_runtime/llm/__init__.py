"""The LLM boundary: the OpenAI / Anthropic adapters behind one interface (the provider-neutral message types are `pallas_runtime.messages`)."""
