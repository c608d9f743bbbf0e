"""The release of this copy of sqlq (the same as pyproject.toml's), on its own so that any module
can name it without importing the package's front door."""

__version__ = "0.2.0"
