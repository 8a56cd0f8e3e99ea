"""docs/operator.md lists exactly the permissions the operator is given (api/rbac.py)."""

from __future__ import annotations

from pallas_operator.operator_rbac import CLUSTER_RULES, LEASE_RULES
from tests.support.cluster import REPO

DOC = (REPO / "docs" / "operator.md").read_text()


def test_every_rbac_rule_is_documented_with_its_verbs() -> None:
    lines = DOC.splitlines()
    for rule in [*CLUSTER_RULES, *LEASE_RULES]:
        resources = [f"`{r}`" for r in rule["resources"]]
        verbs = ", ".join(rule["verbs"])
        matching = [line for line in lines if all(r in line for r in resources) and verbs in line]
        assert matching, f"docs/operator.md does not list {rule['resources']} with verbs {verbs}"
