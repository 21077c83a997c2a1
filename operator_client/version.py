"""The package version, importable from any layer (the package root imports the client)."""

__version__ = "0.1.0"
