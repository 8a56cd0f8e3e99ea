"""The API of the operator: names, the status models and the CRDs generated from the models.

Pure: no Kubernetes client, no kopf. The spec models live in `pallas_runtime.config.resources`
because `pallas run` reads the same manifests.
"""
