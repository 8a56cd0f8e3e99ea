"""Pallas operator: reconciles PallasDeployment and PallasAgent resources into running agents."""

from pallas_io.commands import installed_version

__version__ = installed_version()

DEFAULT_RUNTIME_IMAGE = f"pallas:{__version__}"
"""The runtime image agents and registries run unless told otherwise (`--runtime-image`)."""
