"""The installed distribution's version (reported by ``--version`` and ``/openapi.json``)."""

from importlib import metadata

try:
    VERSION = metadata.version("mnemosyne-memory-service")
except metadata.PackageNotFoundError:  # imported from a source tree that was never installed
    VERSION = "0+unknown"
