"""MkDocs hooks: the config reference's tables are generated from the dataclasses at build time
(:mod:`fl.config_reference`), where the page says ``<!-- config-keys -->``."""

from __future__ import annotations

import sys
from pathlib import Path

MARKER = "<!-- config-keys -->"
ROOT = Path(__file__).resolve().parents[1]


def on_page_markdown(markdown: str, page, **kwargs) -> str:
    if MARKER not in markdown:
        return markdown
    if str(ROOT) not in sys.path:  # the checkout's package, as the docstrings mkdocstrings reads
        sys.path.insert(0, str(ROOT))
    from fl.config_reference import markdown as config_tables

    return markdown.replace(MARKER, config_tables())
