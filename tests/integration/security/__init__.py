"""Adversarial tests: what hostile or careless clients try against agents, kept so it stays fixed.

Each module is one finding of the hardening pass ("Hardening against hostile and careless
clients"), exercised over real HTTP against real agents, fake LLMs and issuers on loopback.
"""
