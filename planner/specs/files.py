"""Reading YAML/JSON files and turning pydantic errors into messages that name file, line and field.

Every user file goes through `load_mapping` (syntax errors carry the line) and `validate_model`
(schema errors carry the field path and, where the file has one, its line). An HTML report that
moeplan wrote (`--html`) is read for the JSON document it embeds (`embedded_json`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from planner.errors import BadInputError

ModelT = TypeVar("ModelT", bound=BaseModel)

MAX_INPUT_FILE_BYTES = 50 * 1024 * 1024
HTML_SUFFIXES = (".html", ".htm")
# the element an HTML report carries its `plan --json` document in (planner.report.html writes it)
EMBEDDED_PLANS_ID = "moeplan-plans"
_EMBEDDED = re.compile(
    r"<script\b[^>]*\bid=[\"']?" + EMBEDDED_PLANS_ID + r"[\"']?[^>]*>(.*?)</script\s*>",
    re.IGNORECASE | re.DOTALL,
)


def read_text(path: Path, what: str) -> str:
    """The file's text, or a BadInputError that says why it cannot be read."""
    if not path.exists():
        raise BadInputError(f"{what} file '{path}' does not exist.")
    if path.is_dir():
        raise BadInputError(f"{what} path '{path}' is a directory; give a file.")
    try:
        size = path.stat().st_size
        if size > MAX_INPUT_FILE_BYTES:
            raise BadInputError(
                f"{what} file '{path}' is {size} bytes; files over {MAX_INPUT_FILE_BYTES} bytes are refused."
            )
        raw = path.read_bytes()
    except OSError as exc:
        raise BadInputError(f"cannot read {what} file '{path}': {exc.strerror}.") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInputError(f"{what} file '{path}' is not UTF-8 text (byte {exc.start}); save it as UTF-8.") from None


def load_yaml(text: str) -> Any:
    """`yaml.safe_load(text)`, parsed by libyaml when PyYAML was built with it (about 10x faster).

    Only the parser differs (the constructor and the resolver are the same Python classes), so the
    data is the same. Text libyaml refuses is parsed again by the pure-Python loader, so errors
    (and their messages: line, column, problem) are PyYAML's own as before.
    """
    loader = getattr(yaml, "CSafeLoader", None)
    if loader is not None:
        try:
            return yaml.load(text, Loader=loader)
        except Exception:  # the pure-Python loader below says what is wrong, as before
            pass
    return yaml.safe_load(text)


def is_html(source: str) -> bool:
    """True for a file name an HTML report would have (.html, .htm)."""
    return source.lower().endswith(HTML_SUFFIXES)


def embedded_json(text: str, source: str, what: str) -> str:
    """The JSON text an HTML report embeds in `<script type="application/json" id="moeplan-plans">`.

    The report escapes `<`, `>` and `&` inside the JSON (as \\u003c ...), so the element's text is
    the JSON itself: no HTML entity to decode.
    """
    found = _EMBEDDED.search(text)
    if found is None:
        raise BadInputError(
            f"{what} file '{source}' is an HTML page without moeplan's plans (no <script id=\"{EMBEDDED_PLANS_ID}\"> "
            "element); give a report written by `moeplan plan --html`, or a plan file."
        )
    return found.group(1)


def parse_mapping(text: str, source: str, what: str) -> dict[str, Any]:
    """Parse YAML or JSON text into a mapping (an HTML report: its embedded JSON); syntax errors name the line."""
    if is_html(source):
        text = embedded_json(text, source, what)
    try:
        data = json.loads(text) if source.endswith(".json") or is_html(source) else load_yaml(text)
    except json.JSONDecodeError as exc:
        raise BadInputError(
            f"{what} file '{source}' is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}."
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise BadInputError(f"{what} file '{source}' is not valid YAML: {problem}{where}.") from None
    except RecursionError:
        raise BadInputError(f"{what} file '{source}' is nested too deeply.") from None
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise BadInputError(f"{what} file '{source}' must hold a mapping of fields at the top level; it is {kind}.")
    return data


def load_mapping(path: Path, what: str) -> tuple[dict[str, Any], str]:
    """The file's top-level mapping and its text (kept for locating lines of later errors)."""
    text = read_text(path, what)
    return parse_mapping(text, str(path), what), text


def line_of(text: str, loc: tuple[int | str, ...]) -> int | None:
    """1-based line of the node at `loc` in a YAML/JSON text, or of its nearest existing parent."""
    try:
        node = yaml.compose(text)
    except (yaml.YAMLError, RecursionError):
        return None
    line = None
    for key in loc:
        if node is None:
            break
        line = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            nxt = None
            for k, v in node.value:
                if str(k.value) == str(key):
                    nxt = v
                    line = k.start_mark.line + 1
                    break
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int):
            node = node.value[key] if 0 <= key < len(node.value) else None
        else:
            break
    else:
        if node is not None:
            line = node.start_mark.line + 1
    return line


def _shown(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _reason(err: Any) -> str:
    """pydantic's error as moeplan says it: what the field must be, and what it got."""
    kind, ctx = err["type"], err.get("ctx") or {}
    got = f"; got {_shown(err['input'])}" if "input" in err and not isinstance(err["input"], dict | list) else ""
    bounds = {
        "greater_than_equal": ("must be >=", "ge"),
        "greater_than": ("must be >", "gt"),
        "less_than_equal": ("must be <=", "le"),
        "less_than": ("must be <", "lt"),
    }
    if kind in bounds:
        words, key = bounds[kind]
        return f"{words} {ctx.get(key)}{got}"
    fixed = {
        "extra_forbidden": "unknown field; remove it or check its spelling",
        "missing": "required field is missing",
        "int_parsing": f"must be a whole number{got}",
        "int_type": f"must be a whole number{got}",
        "int_from_float": f"must be a whole number{got}",
        "float_parsing": f"must be a number{got}",
        "float_type": f"must be a number{got}",
        "finite_number": f"must be a finite number{got}",
        "bool_parsing": f"must be true or false{got}",
        "bool_type": f"must be true or false{got}",
        "string_type": f"must be text{got}",
        "string_too_short": "must not be empty",
        "dict_type": f"must be a mapping of fields{got}",
        "model_type": f"must be a mapping of fields{got}",
        "list_type": f"must be a list{got}",
        "too_short": f"needs at least {ctx.get('min_length')} item(s)",
        "too_long": f"takes at most {ctx.get('max_length')} item(s)",
    }
    if kind in fixed:
        return fixed[kind]
    if kind == "literal_error":
        return f"must be {ctx.get('expected', 'one of the allowed values')}{got}"
    if kind in ("value_error", "assertion_error"):
        return str(err["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return f"{str(err['msg'])[:1].lower()}{str(err['msg'])[1:]}"


def format_validation_error(exc: ValidationError, source: str, what: str, text: str | None = None) -> str:
    """One line: every problem's field path (a flag's name for flags), line when known, and reason."""
    problems = []
    for err in exc.errors(include_url=False):
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        if source == "flags":
            field = "--" + "-".join(str(p) for p in loc).replace("_", "-") if loc else what
        else:
            field = ".".join(str(p) for p in loc) or "(top level)"
        where = ""
        if text is not None and loc:
            ln = line_of(text, loc)
            if ln is not None:
                where = f" (line {ln})"
        problems.append(f"{field}{where}: {_reason(err)}")
    if source == "flags":
        return "; ".join(problems) + "."
    return f"{what} '{source}': " + "; ".join(problems) + "."


def validate_model(model: type[ModelT], data: Any, source: str, what: str, text: str | None = None) -> ModelT:
    """Validate `data` into `model`, raising BadInputError naming every bad field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise BadInputError(format_validation_error(exc, source, what, text)) from None
