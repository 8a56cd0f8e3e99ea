"""Adversarial tests: what hostile and careless clients send an agent, kept so it stays refused.

Each module attacks one surface of a real agent over real HTTP on 127.0.0.1 (credentials,
request bounds, memory, sessions, logs, parameters, long conversations) and checks that the
attack is refused, bounded or scrubbed, and that nothing leaks on the way.
"""
