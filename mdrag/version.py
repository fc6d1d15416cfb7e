"""mdrag's release: imported by the modules that record or report it, without importing the package's API."""

__version__ = "0.1.0"
