"""The LLM boundary: the OpenAI / Anthropic adapters behind one interface.

The provider-neutral message types are `pallas_runtime.messages`.
"""
