"""The one Jinja2 environment of the service's HTML pages (web/templates/): autoescaped,
strict about undefined names, with the ``inline_code`` filter the API reference uses."""

from __future__ import annotations

import re
from pathlib import Path

import jinja2
from markupsafe import Markup, escape

TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).resolve().parent / "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)
_CODE_SPAN = re.compile(r"`([^`]+)`")


def inline_code(text: str) -> Markup:
    """Escape ``text`` and turn its Markdown code spans into ``<code>`` elements."""
    return Markup(_CODE_SPAN.sub(r"<code>\1</code>", str(escape(text))))  # noqa: S704 - escaped first


TEMPLATES.filters["inline_code"] = inline_code
