"""The checks a manifest meets in a cluster, run offline: what `pallas validate` reports.

Four kinds of check, each the same code or rule the cluster uses:

- the spec models (`pallas_api.spec`), from which the CRDs' schemas are generated;
- the CRDs' CEL rules: those about one field are model validators too, and those about the
  whole object (its name, an agent naming itself) have a Python counterpart in `OBJECT_RULES`;
  `CEL_OFFLINE` says, for every CEL rule, where it is checked here (a unit test keeps the two
  lists in step);
- references (deployment, peers, providers, servers, access) and dependency cycles, with the
  operator's own functions (`pallas_api.references`, `render_agent`);
- the apiVersion and a name given twice.

Pure: documents in, problems out. Reading files is the command's job.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from pallas_api import conditions, crds, names
from pallas_api.references import DependencyGraph, Homes, check_references
from pallas_api.render import RenderError, render_agent
from pallas_api.spec import PallasAgentSpec, PallasDeploymentSpec, PallasTriggerSpec, agent_dependencies
from pallas_api.validation import field_problems
from pallas_api.workflow import step_names

SPECS: Mapping[str, type[BaseModel]] = {
    names.DEPLOYMENT_KIND: PallasDeploymentSpec,
    names.AGENT_KIND: PallasAgentSpec,
    names.TRIGGER_KIND: PallasTriggerSpec,
}

ObjectCheck = Callable[[str, Mapping[str, Any]], bool]
"""(metadata.name, raw spec) → whether the rule holds."""


def _name_fits(max_length: int) -> ObjectCheck:
    return lambda name, _spec: bool(re.fullmatch(crds.AGENT_NAME, name)) and len(name) <= max_length


def _not_listed(field_name: str) -> ObjectCheck:
    def check(name: str, spec: Mapping[str, Any]) -> bool:
        listed = spec.get(field_name)
        return not isinstance(listed, list) or name not in listed

    return check


OBJECT_RULES: Mapping[str, Sequence[tuple[crds.Rule, ObjectCheck]]] = {
    names.AGENT_KIND: [
        (crds.AGENT_NAME_RULE, _name_fits(63)),
        (crds.NOT_SELF_IN_AGENTS, _not_listed("agents")),
        (crds.NOT_SELF_IN_DEPENDS_ON, _not_listed("dependsOn")),
        (crds.NOT_SELF_IN_WORKFLOW, lambda name, spec: name not in step_names(spec.get("workflow"))),
    ],
    names.DEPLOYMENT_KIND: [(crds.DEPLOYMENT_NAME_RULE, _name_fits(crds.MAX_DEPLOYMENT_NAME))],
    names.TRIGGER_KIND: [],
}
"""The CEL rules about the whole object, as Python, each beside the rule it mirrors."""

CEL_OFFLINE: Mapping[str, str] = {
    "spec.deployment is immutable": "not checked: a rule about an update, and files have no old version",
    "spec.model must be": "the pattern of PallasAgentSpec.model",
    "spec.model.default must": "the pattern of ModelSpec.default and PallasDeploymentSpec._names",
    "spec.model.models must not name": "ModelSpec._model_refs",
    "spec.model.models keys must be": "ModelSpec._model_refs",
    "spec.model.models keys must start": "PallasDeploymentSpec._names",
    "spec.providers keys": "PallasDeploymentSpec._names",
    "spec.mcpServers keys": "PallasDeploymentSpec._names",
    "a header needs exactly one": "HeaderSpec._exactly_one_source",
    "an MCP server needs exactly one": "McpServerSpec._url_or_stdio",
    "a stdio server takes no": "McpServerSpec._url_or_stdio",
    "a stdio env variable needs": "StdioEnvVar._exactly_one_source",
    "spec.requestParams.responseFormat needs": "ResponseFormat._schema_with_its_type",
    "spec.conversations.store postgres": "ConversationsSpec._postgres_needs_a_dsn",
    "spec.auth.mode oidc needs": "AuthSpec._oidc_settings",
    "spec.auth.oidc is only used": "AuthSpec._oidc_settings",
    "an allowFrom entry needs": "NetworkPeer._one_selector",
    "minDomains needs whenUnsatisfiable": "TopologySpreadConstraint._as_kubernetes_accepts",
    "a workflow needs exactly one": "WorkflowSpec._exactly_one",
    "a parallel workflow's fanIn": "ParallelSpec._fan_in_apart",
    "the evaluator must be another": "EvaluatorSpec._two_agents",
    "a matchLabelKeys key must not be": "TopologySpreadConstraint._as_kubernetes_accepts",
    "a trigger needs exactly one": "PallasTriggerSpec._one_source",
    "conversation.id is only used": "TriggerConversation._id_only_to_continue",
}
"""How each CEL rule that is not in `OBJECT_RULES` is checked offline, by the start of its message."""

RENDER_FIELDS: Mapping[str, str] = {
    conditions.PROVIDER_NOT_FOUND: "spec.model",
    conditions.SERVER_NOT_FOUND: "spec.servers",
    conditions.AGENT_NOT_FOUND: "spec.agents",
    conditions.ACCESS_NOT_ENFORCEABLE: "spec.access",
    conditions.STDIO_NOT_HOSTABLE: "spec.servers",
}
REFERENCE_FIELDS: Mapping[str, str] = {
    conditions.DEPLOYMENT_NOT_FOUND: "spec.deployment",
    conditions.NAME_CONFLICT: "metadata.name",
    conditions.AGENT_NOT_FOUND: "spec.agents/dependsOn",
    conditions.DEPENDENCY_CYCLE: "spec.agents/dependsOn",
    conditions.STEP_OUTSIDE_DEPLOYMENT: "spec.workflow",
}


@dataclass(frozen=True, slots=True)
class Document:
    """One YAML document and where it starts (`FILE:LINE`)."""

    source: str
    body: object


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem: `FILE:LINE: Kind/name: field: what is wrong`."""

    source: str
    object: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.source}: {self.object}: {self.field}: {self.message}"


@dataclass(frozen=True, slots=True)
class _Object:
    source: str
    kind: str
    namespace: str
    name: str
    spec: Any
    """The validated spec, None when the object has problems of its own."""
    dependencies: tuple[str, ...] = ()
    """An agent's `agents` and `dependsOn` as written, valid or not (as the operator reads them)."""
    deployment: str = ""
    """An agent's `deployment` as written."""


@dataclass
class Report:
    """What the documents hold: problems, the objects checked and the documents skipped."""

    problems: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    """What runs, but not as written (an agent's server its deployment does not define)."""
    checked: int = 0
    skipped: list[str] = field(default_factory=list)
    """`FILE:LINE: Kind/name` of objects of other kinds (Services, Secrets…), not checked."""


def reference_problem(
    name: str,
    spec: PallasAgentSpec,
    deployment: PallasDeploymentSpec | None,
    graph: DependencyGraph,
    homes: Homes,
    namespace: str,
) -> tuple[str, str] | None:
    """The operator's first reference problem of an agent among files, as (field, message).

    Shared by `pallas validate` and `pallas run`, whose "namespace" is the files' objects.
    """
    problem = check_references(name, spec, deployment, graph, homes)
    if problem is None:
        return None
    message = problem.message.replace("in this namespace", f"in namespace {namespace!r} of the files")
    return REFERENCE_FIELDS[problem.reason], message


def _rule_finding(source: str, what: str, rule: crds.Rule) -> Finding:
    where = rule.get("fieldPath", ".metadata.name").removeprefix(".")
    return Finding(source, what, where, rule["message"].removeprefix(where + " "))


def _object(doc: Document, report: Report) -> _Object | None:
    body = doc.body
    if not isinstance(body, dict):
        report.problems.append(Finding(doc.source, "(document)", "(top level)", "must be a mapping"))
        return None
    kind, metadata = body.get("kind"), body.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    what = f"{kind}/{name}"
    if not isinstance(kind, str) or not isinstance(name, str) or not name:
        report.problems.append(Finding(doc.source, what, "kind, metadata.name", "every object needs both"))
        return None
    if kind not in SPECS:
        report.skipped.append(f"{doc.source}: {what}")
        return None
    report.checked += 1
    problems = report.problems
    before = len(problems)
    if body.get("apiVersion") != names.API_VERSION_STRING:
        message = f"must be {names.API_VERSION_STRING} (got {body.get('apiVersion')!r})"
        problems.append(Finding(doc.source, what, "apiVersion", message))
    raw_spec = body.get("spec")
    spec_dict = raw_spec if isinstance(raw_spec, dict) else {}
    problems.extend(
        _rule_finding(doc.source, what, rule)
        for rule, holds in OBJECT_RULES[kind]
        if not holds(name, spec_dict)
    )
    spec = None
    try:
        spec = SPECS[kind].model_validate(raw_spec)
    except ValidationError as exc:
        for problem in field_problems(exc, prefix="spec"):
            where, _, message = problem.partition(": ")
            problems.append(Finding(doc.source, what, where, message))
    if len(problems) > before:
        spec = None  # references are checked only on objects that pass their own checks
    namespace = str(metadata.get("namespace") or "default") if isinstance(metadata, dict) else "default"
    home = str(spec_dict.get("deployment") or "")
    return _Object(doc.source, kind, namespace, name, spec, _dependencies(spec_dict), home)


def _dependencies(spec: Mapping[str, Any]) -> tuple[str, ...]:
    agents, depends_on, a2a = (spec.get(key) for key in ("agents", "dependsOn", "a2aAgents"))
    external = a2a if isinstance(a2a, list) else []
    steps = [s for s in step_names(spec.get("workflow")) if s not in external]
    called = [*(agents if isinstance(agents, list) else []), *steps]
    return tuple(agent_dependencies(called, depends_on if isinstance(depends_on, list) else []))


def _check_agent(agent: _Object, objects: Sequence[_Object], report: Report, *, local: bool) -> None:
    """The operator's reference checks and rendering, for an agent whose own checks passed."""
    spec: PallasAgentSpec = agent.spec
    what = f"{agent.kind}/{agent.name}"
    same_ns = [o for o in objects if o.namespace == agent.namespace]
    deployments = [o for o in same_ns if o.kind == names.DEPLOYMENT_KIND and o.name == spec.deployment]
    if deployments and deployments[0].spec is None:
        return  # its deployment's own problems are reported; references would only repeat them
    deployment: PallasDeploymentSpec | None = deployments[0].spec if deployments else None
    agents = [o for o in same_ns if o.kind == names.AGENT_KIND]
    graph = {o.name: o.dependencies for o in agents}
    homes = {o.name: o.deployment for o in agents}
    problem = reference_problem(agent.name, spec, deployment, graph, homes, agent.namespace)
    if problem is not None:
        report.problems.append(Finding(agent.source, what, *problem))
        return
    assert deployment is not None  # check_references reports a missing one
    urls = {peer: names.agent_url(peer, agent.namespace, 8000) for peer in spec.peers()}
    url = names.agent_url(agent.name, agent.namespace, spec.service.port)
    try:
        rendered = render_agent(
            agent.name, spec, deployment, urls, namespace=agent.namespace, url=url,
            local=local, stdio_urls={} if local else None,
        )  # fmt: skip
    except RenderError as exc:
        report.problems.append(Finding(agent.source, what, RENDER_FIELDS.get(exc.reason, "spec"), str(exc)))
        return
    if (warning := rendered.warning) is not None:
        report.warnings.append(Finding(agent.source, what, RENDER_FIELDS[warning.reason], warning.message))


EVENT_NOT_RUN = (
    "event triggers are run by the operator only (`pallas run` watches no objects), on kinds the "
    "chart's triggers.eventKinds allows (docs/triggers.md); `when` is compiled and checked"
)


def _check_trigger(trigger: _Object, objects: Sequence[_Object], report: Report) -> None:
    """A trigger's agent must be a PallasAgent of its namespace among the files."""
    spec: PallasTriggerSpec = trigger.spec
    what = f"{trigger.kind}/{trigger.name}"
    if not any(
        o.kind == names.AGENT_KIND and o.namespace == trigger.namespace and o.name == spec.agent
        for o in objects
    ):
        message = f"no PallasAgent {spec.agent!r} in namespace {trigger.namespace!r} of the files"
        report.problems.append(Finding(trigger.source, what, "spec.agent", message))
    if spec.event is not None:
        report.warnings.append(Finding(trigger.source, what, "spec.event", EVENT_NOT_RUN))


def check_documents(documents: Sequence[Document], *, local: bool = False) -> Report:
    """Check every PallasDeployment, PallasAgent and PallasTrigger of the documents, alone and together.

    `local`: as `pallas run` would run them rather than a cluster (it hosts what a cluster
    cannot: a stateful stdio server's process per session).
    """
    report = Report()
    objects: list[_Object] = []
    for doc in documents:
        if doc.body is None:  # an empty document, e.g. after a trailing `---`
            continue
        obj = _object(doc, report)
        if obj is None:
            continue
        twin = next(
            (o for o in objects if (o.kind, o.namespace, o.name) == (obj.kind, obj.namespace, obj.name)), None
        )
        if twin is not None:
            message = f"defined twice in namespace {obj.namespace!r} (first at {twin.source})"
            report.problems.append(Finding(obj.source, f"{obj.kind}/{obj.name}", "metadata.name", message))
            continue
        objects.append(obj)
    for obj in objects:
        if obj.kind == names.AGENT_KIND and obj.spec is not None:
            _check_agent(obj, objects, report, local=local)
        elif obj.kind == names.TRIGGER_KIND and obj.spec is not None:
            _check_trigger(obj, objects, report)
    order = {doc.source: index for index, doc in enumerate(documents)}
    report.problems.sort(key=lambda finding: order[finding.source])  # stable: in file order
    return report
