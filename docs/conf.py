"""Sphinx configuration of sqlq's documentation site (Sphinx, MyST Markdown, Furo).

Build it strictly, as CI does (tests/test_docs_site.py)::

    .venv/bin/pip install -e '.[docs]'
    .venv/bin/sphinx-build -W --keep-going -b html docs docs/_build/html

Nothing here reaches the network: no intersphinx, and Furo's search is Sphinx's own,
which runs in the browser on the index the build writes (searchindex.js).
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))  # the site's own directives (sqlq_reference.py)
sys.path.insert(0, str(DOCS.parent))  # sqlq itself, when it is not installed

import sqlq  # noqa: E402

project = "sqlq"
author = "the sqlq authors"
copyright = "the sqlq authors"
release = version = sqlq.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinxarg.ext",
    "sqlq_reference",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]

# --- MyST -----------------------------------------------------------------------
myst_enable_extensions = [
    "colon_fence",  # ::: fences for admonitions and directives
    "deflist",  # term / definition lists
    "attrs_inline",
    "fieldlist",
]
# Anchors for the headings down to ###, so that pages link to sections (page.md#a-heading).
myst_heading_anchors = 3

# --- strictness -------------------------------------------------------------------
# Every cross-reference to sqlq's own API must resolve (a renamed method fails the build);
# the names of other projects in type hints (SQLAlchemy, the standard library, Django)
# are not documented here and are not checked.
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(?!sqlq\b).*"),
    # type variables (P, R) of generic signatures
    (r"py:.*", r"sqlq(\.\w+)*\.[A-Z]"),
]

# --- autodoc ----------------------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = True
autodoc_default_options = {"members": True}
# Django 6.1 needs Python 3.12: where it is missing (the suite's Python 3.11) the
# Django backend's reference is built from a stand-in for it.
try:
    import django  # noqa: F401
except ImportError:
    autodoc_mock_imports = ["django"]

# --- HTML -------------------------------------------------------------------------
html_theme = "furo"
html_title = f"sqlq {release}"
html_theme_options = {
    "navigation_with_keys": True,
}
# No "view source" links, and no copies of the Markdown sources in the built site.
html_show_sourcelink = False
html_copy_source = False
