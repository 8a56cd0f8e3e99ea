"""The kopf layer: registrations, reconciles that read like a table of contents, the process.

Everything here is wiring: decisions are in `status` and `builders`, I/O in `k8s`.
"""
