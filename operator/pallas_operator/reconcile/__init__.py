"""Reconciles: read the world, decide (pure `status` and `builders`), write what changed (`k8s`).

`plan` decides what an agent should have; `agent` and `deployment` are the two reconciles the
work queue runs; `children` applies a set of desired children, the one apply loop both share;
`delegation`, `monitoring`, `provider_checks` and `unauthenticated` are the deployment's other
concerns; `conversation_purge` is a deleted agent's finalizer; `orphans` is the start-up sweep;
`scaling` hands a scaled agent's replicas to the scaling loop and keeps the loop running.
"""
