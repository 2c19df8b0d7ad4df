"""The lowest layer: errors, text made safe, files written and read, the record spool; and the package's
version, which the result files record (here, so the modules that write them need not import the package
root, which is the app layer)."""

__version__ = "0.1.0"
