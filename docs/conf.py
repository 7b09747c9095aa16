"""Sphinx configuration of vdifrec's documentation (``make docs``)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Document the package of this checkout (its extension is built in place by `make install`).
sys.path.insert(0, str(ROOT / "python"))

project = "vdifrec"
author = "the vdifrec authors"
copyright = "the vdifrec authors"
# The version is written in Cargo.toml only.
release = re.search(r'^version\s*=\s*"([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.M).group(1)  # type: ignore[union-attr]
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "numpydoc",
    "sphinxarg.ext",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
myst_enable_extensions = ["colon_fence", "deflist"]
# Anchors for headings down to ###, so that pages can link to a section (page.md#a-heading).
myst_heading_anchors = 3

# The API reference documents public names (vdifrec.Recorder), not the modules behind them.
autodoc_member_order = "bysource"
autodoc_typehints = "none"
add_module_names = True
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False

html_theme = "pydata_sphinx_theme"
html_title = f"vdifrec {release}"
html_static_path = ["_static"]
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
}
