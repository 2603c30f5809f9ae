"""Filling the page template: the Jinja2 environment, and JSON and SVG made safe to inline.

Jinja2 escapes every value (autoescape); what is inserted raw is marked `Markup` here, and only
here: the embedded JSON (with `<`, `>` and `&` escaped as JSON unicode escapes, so no `</script>`
can close its element early and the element's text is the JSON itself) and the SVG pictures
matplotlib drew (their XML prolog and DOCTYPE removed, which inline SVG must not carry).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import jinja2
    from markupsafe import Markup

TEMPLATES = Path(__file__).resolve().parent / "templates"
PAGE_TEMPLATE = "page.html.j2"
_METADATA = re.compile(r"\s*<metadata>.*?</metadata>", re.DOTALL)
_JSON_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """Templates from the package folder; every value escaped; an undefined name is an error."""
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def script_json(text: str) -> Markup:
    """JSON text to put inside a <script type="application/json"> element unchanged in meaning."""
    from markupsafe import Markup

    for char, escaped in _JSON_ESCAPES.items():
        text = text.replace(char, escaped)
    return Markup(text)


def inline_svg(svg: bytes | str) -> Markup:
    """An SVG document as an element to put in HTML: from `<svg` on, without the RDF metadata
    matplotlib writes (the creator's name, under namespaces the page has no use for)."""
    from markupsafe import Markup

    text = svg.decode("utf-8") if isinstance(svg, bytes) else svg
    start = text.find("<svg")
    if start < 0:
        raise ValueError("not an SVG document")
    return Markup(_METADATA.sub("", text[start:]).strip())


@lru_cache(maxsize=1)
def _assets() -> dict[str, Markup]:
    """The page's style sheet and script, inlined as they are (not templates: no Jinja syntax in them)."""
    from markupsafe import Markup

    return {
        "css": Markup((TEMPLATES / "page.css").read_text(encoding="utf-8")),
        "js": Markup((TEMPLATES / "page.js").read_text(encoding="utf-8")),
    }


def render_page(context: dict[str, Any]) -> str:
    """The page's HTML."""
    return environment().get_template(PAGE_TEMPLATE).render(**_assets(), **context)
