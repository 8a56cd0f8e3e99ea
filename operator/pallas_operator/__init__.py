"""Pallas operator: reconciles PallasDeployment and PallasAgent resources into running agents."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pallas")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"

DEFAULT_RUNTIME_IMAGE = f"pallas:{__version__}"
"""The runtime image agents and registries run unless told otherwise (`--runtime-image`)."""
