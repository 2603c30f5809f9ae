"""The shipped catalogs (hardware/, models/, plans/, validation/) and loading a spec by catalog name or path.

In a wheel the catalogs sit in `planner/_catalog/` (hatchling force-include); in a source
checkout or an editable install they are the repository's top-level folders. Anywhere a catalog
name is accepted, a path to the user's own file is accepted too: hardware YAML; model YAML in
moeplan's form or a HuggingFace config.json; plan YAML or JSON, or an HTML report moeplan wrote
(its embedded `plan --json` document).
"""

from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from planner.errors import BadInputError
from planner.specs.files import HTML_SUFFIXES, load_mapping, validate_model
from planner.specs.hardware import HardwareSpec
from planner.specs.hf_config import from_hf_config, looks_like_hf_config
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan, migrate_plan_document

CatalogKind = Literal["hardware", "models", "plans", "validation"]
_SUFFIXES = (".yaml", ".yml", ".json")
_PLAN_SUFFIXES = _SUFFIXES + HTML_SUFFIXES  # a plan may also come from an HTML report (--html)


def catalog_dir(kind: CatalogKind) -> Path:
    """Folder of a catalog: the packaged copy if present, else the repository's."""
    here = Path(__file__).resolve().parent.parent
    packaged = here / "_catalog" / kind
    if packaged.is_dir():
        return packaged
    return here.parent / kind


def is_plan_document(data: Any) -> bool:
    """True for a plan mapping or a `plan --json` document ({"plans": [...]})."""
    if not isinstance(data, dict):
        return False
    if isinstance(data.get("plans"), list):
        return True
    return "workload" in data and any(k in data for k in ("decode", "prefill", "colocated"))


def plan_files(folder: Path) -> list[Path]:
    """The plan files of a folder (not the schema, the published rows or anything else), sorted."""
    out = []
    for p in sorted(folder.iterdir()):
        if p.suffix.lower() not in _PLAN_SUFFIXES or p.stem.startswith("_") or not p.is_file():
            continue
        try:
            data, _ = load_mapping(p, "plan")
        except BadInputError:
            continue
        if is_plan_document(data):
            out.append(p)
    return out


def catalog_names(kind: CatalogKind) -> list[str]:
    """Names (file stems) of the entries of a catalog, sorted (for plans: plan files only)."""
    folder = catalog_dir(kind)
    if not folder.is_dir():
        return []
    if kind == "plans":
        return [p.stem for p in plan_files(folder)]
    return sorted(p.stem for p in folder.iterdir() if p.suffix in _SUFFIXES and not p.stem.startswith("_"))


def _resolve(kind: CatalogKind, name_or_path: str, what: str) -> Path:
    path = Path(name_or_path)
    if kind == "models" and path.is_dir():
        config = path / "config.json"  # a Hugging Face model folder
        if not config.is_file():
            raise BadInputError(f"model folder '{name_or_path}' holds no config.json; give a model file or folder.")
        return config
    if kind == "plans" and path.is_dir():
        found = ", ".join(p.name for p in plan_files(path)) or "none"
        raise BadInputError(f"plan '{name_or_path}' is a folder; give one of its plan files: {found}.")
    suffixes = _PLAN_SUFFIXES if kind == "plans" else _SUFFIXES
    looks_like_path = path.suffix.lower() in suffixes or "/" in name_or_path or "\\" in name_or_path
    if looks_like_path:
        if not path.exists():
            raise BadInputError(f"{what} file '{name_or_path}' does not exist.")
        return path
    folder = catalog_dir(kind)
    for suffix in _SUFFIXES:
        candidate = folder / f"{name_or_path}{suffix}"
        if candidate.is_file():
            return candidate
    known = ", ".join(catalog_names(kind)) or "(none)"
    raise BadInputError(
        f"unknown {what} '{name_or_path}'; known names: {known}. Or give a path to a "
        f"{'YAML or config.json' if kind == 'models' else 'YAML'} file."
    )


@lru_cache(maxsize=64)
def _load_hardware_path(path: Path) -> HardwareSpec:
    data, text = load_mapping(path, "hardware")
    return validate_model(HardwareSpec, data, str(path), "hardware", text)


@lru_cache(maxsize=64)
def _load_model_path(path: Path) -> ModelSpec:
    data, text = load_mapping(path, "model")
    if looks_like_hf_config(data):
        try:
            fields = from_hf_config(data, path.stem if path.name != "config.json" else path.parent.name)
        except (ValueError, TypeError) as exc:
            raise BadInputError(f"model config '{path}' cannot be read: {exc}.") from None
        return validate_model(ModelSpec, fields, str(path), "model config (translated)", None)
    return validate_model(ModelSpec, data, str(path), "model", text)


@lru_cache(maxsize=1)
def _model_sources() -> dict[str, dict[str, object]]:
    path = catalog_dir("models") / "_sources.yaml"
    if not path.is_file():
        return {}
    data, _ = load_mapping(path, "model sources")
    return {str(k): v for k, v in data.items() if isinstance(v, dict)}


def model_source(name: str) -> dict[str, object]:
    """Where a catalog model comes from and its publisher's parameter counts ({} for user files)."""
    return dict(_model_sources().get(name, {}))


def load_hardware(name_or_path: str) -> HardwareSpec:
    """The machine called `name_or_path` in the catalog, or read from that YAML path."""
    return _load_hardware_path(_resolve("hardware", name_or_path, "hardware").resolve())


def load_model(name_or_path: str) -> ModelSpec:
    """The model called `name_or_path` in the catalog, or read from that YAML/config.json path."""
    return _load_model_path(_resolve("models", name_or_path, "model").resolve())


def load_plan(path_or_name: str, rank: int | None = None) -> tuple[Plan, str]:
    """A plan from a YAML/JSON path, or one of the shipped plans by name; also its text.

    The file may also be the document `moeplan plan --json` writes ({"status": ..., "plans":
    [...]}): `rank` picks its plan (default 1). For a single plan, `rank` must be 1 or None.
    """
    path = _resolve("plans", path_or_name, "plan")
    data, text = load_mapping(path, "plan")
    if "plans" not in data and str(data.get("status", "")).upper() == "INFEASIBLE":
        # what `moeplan plan --json` writes when nothing is feasible: a verdict, not a plan
        reason = str(data.get("reason") or "no reason given").rstrip(".")
        raise BadInputError(
            f"plan '{path}' holds no plan: the search it was exported from was infeasible ({reason}). "
            "Re-run `moeplan plan` with the change it names, or give a plan file."
        )
    if isinstance(data.get("plans"), list):
        plans = data["plans"]
        want = 1 if rank is None else rank
        if not plans:
            status = data.get("status")
            found = f"the search ended {status}" if status else "the document has no status"
            raise BadInputError(
                f"plan '{path}' holds no plans (its 'plans' list is empty; {found}); give a `moeplan plan --json` "
                "export of a search that found plans, or a plan file."
            )
        ranks = [p.get("rank") if isinstance(p, dict) else None for p in plans]
        index = ranks.index(want) if want in ranks else want - 1
        numbered = all(isinstance(r, int) for r in ranks)
        if numbered and want not in ranks and ranks != list(range(1, len(plans) + 1)):
            # a sweep's report numbers its plans by point, and infeasible points have none
            held = ", ".join(str(r) for r in ranks)
            raise BadInputError(f"--rank {want}: plan '{path}' holds plans numbered {held}; pick one of them.")
        if not 0 <= index < len(plans):
            raise BadInputError(f"--rank {want}: plan '{path}' holds ranks 1 to {len(plans)}; pick one of them.")
        data, source, text_for_lines = plans[index], f"{path} (rank {want})", None
    else:
        if rank not in (None, 1):
            raise BadInputError(
                f"--rank {rank}: plan '{path}' holds a single plan; drop --rank or give a plan --json export."
            )
        source, text_for_lines = str(path), text
    plan = validate_model(Plan, data, source, "plan", text_for_lines)
    try:
        _, notes = migrate_plan_document(data)
    except ValueError:  # validation above already accepted it; nothing more to say
        notes = []
    for note in notes:
        # an old file still works; say once, on stderr, that it was read in the new format
        print(f"note: {path}: {note}", file=sys.stderr)
    return plan, text


def plan_base_dir(path_or_name: str) -> Path | None:
    """Folder a plan file sits in (relative model/hardware paths in it resolve from there)."""
    try:
        return _resolve("plans", path_or_name, "plan").resolve().parent
    except BadInputError:
        return None
