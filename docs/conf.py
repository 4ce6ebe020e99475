"""Sphinx configuration of the dist-grader manual (``sphinx-build -W --keep-going docs docs/_build/html``).

Pages are MyST Markdown, organised by reader; the CLI and format references are generated from
``grader.cli`` and ``grader/schemas/`` by ``_ext/grader_reference.py``.  ``tests/test_docs.py`` builds the
site with warnings as errors and checks every internal link.
"""

import sys
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

project = "dist-grader"
author = "the dist-grader authors"
copyright = "the dist-grader authors, MIT licence"
release = metadata.version("dist-grader")
version = release

extensions = ["myst_parser", "grader_reference"]
source_suffix = {".md": "markdown"}
root_doc = "index"
# _build: the output; handouts: the course's own documents, kept as they were given out (their headings
# follow a notebook's cells, not a page's outline), linked from each pack's page on GitHub
exclude_patterns = ["_build", "handouts", "Thumbs.db", ".DS_Store"]

# The help strings and schema descriptions are quoted as written: `--backend` must not become an en dash
smartquotes = False
# A heading that skips a level (rubric-rationale-a5.md's ### under its #) is the only warning let through:
# tests read those files' ## sections as the rubric's items, so a level cannot be added there
suppress_warnings = ["myst.header"]

myst_enable_extensions = ["colon_fence", "deflist"]
# `[text](#a-heading)` and `[text](page.md#a-heading)` resolve for headings down to ###
myst_heading_anchors = 3

html_theme = "furo"
html_title = f"dist-grader {release}"
html_static_path = ["_static"]
# the generated references' tables fit the page: long paths and usage lines wrap
html_css_files = ["reference.css"]
# A reference to a document, a heading or a label that does not exist is an error, not a plain text
nitpicky = True
