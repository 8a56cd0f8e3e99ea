"""The Pallas contract: what the operator, the agent runtime and the registry agree on.

One package, imported by all three and importing none of them (as CloudNativePG's `api/v1`):

- `names`: the API group, kinds, labels, annotations, child names and in-cluster URLs;
- `spec`: the PallasDeployment / PallasAgent spec models (the schema users write);
- `status`: the status models, phases, health statuses and condition reasons;
- `config`: one agent's runtime config (the ConfigMap contract between operator and pod);
- `render`: the pure mapping from specs to an agent config (operator and `pallas run` alike);
- `health`: the `get_health` report an agent returns and its readers parse;
- `kube`: the custom resources as lightkube resource classes;
- `crds` / `schema`: the CRDs generated from the models (`hack/gen-crds`).

Everything here is pure: no I/O, no Kubernetes client calls, no MCP.
"""
