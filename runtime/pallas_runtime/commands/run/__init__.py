"""`pallas run`: the manifests' agents and registry in one local process.

The plan from the manifests, the hosting, the start-up banner and `--reload`.
"""
