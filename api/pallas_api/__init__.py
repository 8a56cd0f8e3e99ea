"""The Pallas contract: what the operator, the agent runtime and the registry agree on.

One package, imported by all three and importing none of them (as CloudNativePG's `api/v1`):

- `names`: the API group, kinds, labels, annotations, child names and in-cluster URLs;
- `wire`: the one camelCase convention of the models;
- `spec`: the PallasDeployment / PallasAgent / PallasTrigger spec models (the schema users
  write), one module per kind;
- `triggers`: the pure core of PallasTriggers: schedules (croniter), message templates, webhook
  signatures, concurrency, the per-minute bound and run history;
- `status` / `conditions`: the status models, phases, health statuses, condition types and reasons;
- `config`: one agent's runtime config (the ConfigMap contract between operator and pod);
- `workflow`: the workflow shapes (`spec.workflow`), which the spec and the config share;
- `fields`: the patterns, bounds, defaults and settings models `spec` and `config` share, below
  both, so neither imports the other;
- `live`: which config edits a running agent takes in place and which need a new process, and
  the config hashes the operator and the pods compare;
- `render`: the pure mapping from specs to an agent config (operator and `pallas run` alike);
- `model_rules`: what each provider and model takes where they differ (Claude families, the
  reasoning effort values), for the renderer's checks and the runtime's adapters;
- `pod_memory`: the memory an agent pod needs, from the bounds its spec sets on what it keeps;
- `spending`: models' prices and agents' budgets (tokens and cost per UTC window), their windows;
- `health`: the `get_health` report an agent returns and its readers parse;
- `errors`: the machine-readable codes of an agent's tool errors;
- `approval`: which tool calls wait for the caller's approval (a server's `requireApproval`);
- `references` / `checks` / `validation` / `urls`: the checks of manifests the operator,
  `pallas validate` and `pallas run` share, and validation errors in a user's words;
- `crds` / `schema`: the CRDs generated from the models (`hack/generate/crds`).

Everything here is pure: no network, no Kubernetes client, no MCP, no logging or terminal set-up
(`pallas_io` beside it holds those, and this package never imports it; the import-linter
contracts in pyproject.toml check both). The only things read from outside are what a reader of
the contract hands it: `config.load_config` reads an agent config file (the reverse of
`config.render_config`) and `config.HeaderConfig.resolve` the environment variable a header names.
"""
