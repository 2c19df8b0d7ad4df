"""The package version, in a module of its own: the result files record it, and the modules that
write them must not import the package root (the app layer, docs/architecture.md)."""

__version__ = "0.1.0"
