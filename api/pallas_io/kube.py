"""The custom resources as lightkube resource classes, for every client of the API server."""

from __future__ import annotations

from lightkube.generic_resource import create_namespaced_resource

from pallas_api import names

PallasAgent = create_namespaced_resource(names.GROUP, names.VERSION, names.AGENT_KIND, names.AGENT_PLURAL)
PallasDeployment = create_namespaced_resource(
    names.GROUP, names.VERSION, names.DEPLOYMENT_KIND, names.DEPLOYMENT_PLURAL
)
PallasTrigger = create_namespaced_resource(
    names.GROUP, names.VERSION, names.TRIGGER_KIND, names.TRIGGER_PLURAL
)
