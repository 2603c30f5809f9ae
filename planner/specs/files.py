"""Reading YAML/JSON files and turning pydantic errors into messages that name file, line and field.

Every user file goes through `load_mapping` (syntax errors carry the line) and `validate_model`
(schema errors carry the field path and, where the file has one, its line).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from planner.errors import BadInputError

ModelT = TypeVar("ModelT", bound=BaseModel)

MAX_INPUT_FILE_BYTES = 50 * 1024 * 1024


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


def parse_mapping(text: str, source: str, what: str) -> dict[str, Any]:
    """Parse YAML or JSON text into a mapping; syntax errors name the line."""
    try:
        data = json.loads(text) if source.endswith(".json") else yaml.safe_load(text)
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


def format_validation_error(exc: ValidationError, source: str, what: str, text: str | None = None) -> str:
    """One line per problem: field path, line (when known) and pydantic's reason."""
    lines = [f"{what} '{source}' is invalid:"]
    for err in exc.errors(include_url=False):
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        field = ".".join(str(p) for p in loc) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field; remove it or check its spelling"
        elif err["type"] == "missing":
            msg = "required field is missing"
        where = ""
        if text is not None and loc:
            ln = line_of(text, loc)
            if ln is not None:
                where = f" (line {ln})"
        lines.append(f"  - {field}{where}: {msg}")
    return "\n".join(lines)


def validate_model(model: type[ModelT], data: Any, source: str, what: str, text: str | None = None) -> ModelT:
    """Validate `data` into `model`, raising BadInputError naming every bad field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise BadInputError(format_validation_error(exc, source, what, text)) from None
