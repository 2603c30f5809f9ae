"""The shipped catalogs (hardware/, models/, plans/, validation/) and loading a spec by catalog name or path.

In a wheel the catalogs sit in `planner/_catalog/` (hatchling force-include); in a source
checkout or an editable install they are the repository's top-level folders. Anywhere a catalog
name is accepted, a path to the user's own file is accepted too: hardware YAML; model YAML in
moeplan's form or a HuggingFace config.json; plan YAML or JSON, or an HTML report moeplan wrote
(its embedded `plan --json` document).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from planner.errors import BadInputError
from planner.specs.files import HTML_SUFFIXES, load_mapping, validate_model
from planner.specs.hardware import HardwareSpec
from planner.specs.hf_config import from_hf_config, looks_like_hf_config
from planner.specs.model import DraftSpec, ModelSpec
from planner.specs.plan import Plan, migrate_plan_document

CatalogKind = Literal["hardware", "models", "drafts", "plans", "validation"]
_SUFFIXES = (".yaml", ".yml", ".json")
_FILE_KINDS = {"models": "YAML or config.json", "drafts": "config.json"}
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
    if kind in ("models", "drafts") and path.is_dir():
        config = path / "config.json"  # a Hugging Face model folder
        if not config.is_file():
            raise BadInputError(f"{what} folder '{name_or_path}' holds no config.json; give a {what} file or folder.")
        return config
    if kind == "plans" and path.is_dir():
        found = ", ".join(p.name for p in plan_files(path)) or "none"
        raise BadInputError(f"plan '{name_or_path}' is a folder; give one of its plan files: {found}.")
    suffixes = _PLAN_SUFFIXES if kind == "plans" else _SUFFIXES
    looks_like_path = path.suffix.lower() in suffixes or "/" in name_or_path or "\\" in name_or_path
    if looks_like_path:
        if not path.exists():
            hint = did_you_mean(kind, name_or_path)
            raise BadInputError(f"{what} file '{name_or_path}' does not exist" + (f": {hint}" if hint else "."))
        return path
    folder = catalog_dir(kind)
    for suffix in _SUFFIXES:
        candidate = folder / f"{name_or_path}{suffix}"
        if candidate.is_file():
            return candidate
    known = ", ".join(catalog_names(kind)) or "(none)"
    hint = did_you_mean(kind, name_or_path)
    raise BadInputError(
        f"unknown {what} '{name_or_path}'"
        + (f": {hint} Known" if hint else "; known")
        + f" names: {known}. Or give a path to a {_FILE_KINDS.get(kind, 'YAML')} file."
    )


def _hub_ids() -> dict[str, str]:
    """Hugging Face repository id (lower case) -> catalog model, from models/_sources.yaml."""
    from planner.specs.files import load_yaml

    path = catalog_dir("models") / "_sources.yaml"
    if not path.is_file():
        return {}
    out = {}
    for name, entry in (load_yaml(path.read_text(encoding="utf-8")) or {}).items():
        source = str((entry or {}).get("source", ""))
        if "huggingface.co/" in source:
            repo = source.split("huggingface.co/", 1)[1].split()[0].strip("/")
            out[repo.lower()] = name
    return out


def did_you_mean(kind: CatalogKind, given: str) -> str:
    """'did you mean 'x'?' for a catalog name given in the wrong case, as a Hugging Face id, misspelt
    by a little (difflib's close matches) or belonging to the other catalog; '' when nothing is close."""
    import difflib

    names = catalog_names(kind)
    by_lower = {n.lower(): n for n in names}
    text = given.strip()
    if text.lower() in by_lower:
        return f"did you mean '{by_lower[text.lower()]}' (catalog names are lower case)?"
    if kind == "models" and "/" in text:
        hub = _hub_ids().get(text.strip("/").lower())
        tail = text.rstrip("/").rsplit("/", 1)[-1].lower()
        match = hub or by_lower.get(tail)
        if match:
            return (
                f"did you mean the catalog model '{match}'? (A Hugging Face id is not downloaded: give a catalog "
                "name, or a local model folder or config.json.)"
            )
    close = difflib.get_close_matches(text.lower(), list(by_lower), n=1, cutoff=0.75)
    if close:
        return f"did you mean '{by_lower[close[0]]}'?"
    other: CatalogKind | None = {"models": "hardware", "hardware": "models"}.get(kind)  # type: ignore[assignment]
    if other is not None and text.lower() in {n.lower() for n in catalog_names(other)}:
        flag = "--hardware" if other == "hardware" else "--model"
        return f"'{text}' is a {'machine' if other == 'hardware' else 'model'}: did you mean {flag} {text.lower()}?"
    return ""


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
        return _validate_hf(fields, path, data)
    return validate_model(ModelSpec, data, str(path), "model", text)


def _validate_hf(fields: dict[str, Any], path: Path, data: dict[str, Any]) -> ModelSpec:
    """The ModelSpec read from a config.json; a problem is named by the config.json key it came from."""
    from pydantic import ValidationError

    from planner.specs.files import _reason as error_reason  # (files.py is in the placement memo's code digest)
    from planner.specs.hf_config import in_hf_names

    try:
        return ModelSpec.model_validate(fields)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            loc = ".".join(str(p) for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
            missing = "input" in err and err["input"] is None
            key, reason = in_hf_names(loc, "missing from config.json" if missing else error_reason(err))
            problems.append(f"{key or '(config.json)'}: {reason}")
        kind = data.get("model_type") or (data.get("text_config") or {}).get("model_type")
        how = "" if kind else " (no model_type: read by its fields alone)"
        raise BadInputError(f"model config '{path}'{how}: " + "; ".join(problems) + ".") from None


@lru_cache(maxsize=2)
def _sources(kind: CatalogKind) -> dict[str, dict[str, object]]:
    """A catalog's `_sources.yaml` (models/, drafts/): entry name -> what it says of that entry."""
    path = catalog_dir(kind) / "_sources.yaml"
    if not path.is_file():
        return {}
    data, _ = load_mapping(path, f"{kind} sources")
    return {str(k): v for k, v in data.items() if isinstance(v, dict)}


def model_source(name: str) -> dict[str, object]:
    """Where a catalog model comes from and its publisher's parameter counts ({} for user files)."""
    return dict(_sources("models").get(name, {}))


def load_hardware(name_or_path: str) -> HardwareSpec:
    """The machine called `name_or_path` in the catalog, or read from that YAML path."""
    return _load_hardware_path(_resolve("hardware", name_or_path, "hardware").resolve())


def load_model(name_or_path: str) -> ModelSpec:
    """The model called `name_or_path` in the catalog, or read from that YAML/config.json path."""
    return _load_model_path(_resolve("models", name_or_path, "model").resolve())


_STRETCHED_SUFFIX = "-yarn"  # a catalog entry NAME-yarn: NAME with a RoPE scaling that reaches further


def context_variant_base(name: str) -> str:
    """NAME for a catalog entry NAME-yarn that differs from catalog model NAME only in its name and context
    (qwen3-235b-a22b-yarn: Qwen3-235B with its model card's YaRN; the same weights and forward), else `name`."""
    plain = name.removesuffix(_STRETCHED_SUFFIX)
    if plain == name or not {name, plain} <= set(catalog_names("models")):
        return name
    same = {"name", "max_context_tokens"}
    return plain if load_model(name).model_dump(exclude=same) == load_model(plain).model_dump(exclude=same) else name


def longer_context_hint(model_name: str, tokens: int) -> str:
    """', or use --model NAME-yarn (...)' when the catalog holds the model with a RoPE scaling that reaches
    `tokens` (context_variant_base), else '': the tail of the command line's too-long refusal."""
    stretched = f"{model_name}{_STRETCHED_SUFFIX}"
    if context_variant_base(stretched) != model_name:
        return ""
    reach = load_model(stretched).max_context_tokens
    if reach < tokens:
        return ""
    return f", or use --model {stretched} (the model with YaRN rope scaling, up to {reach:,} tokens)"


def draft_source(name: str) -> dict[str, object]:
    """Where a catalog draft model comes from, the model it serves and its checkpoint ({} for user files)."""
    return dict(_sources("drafts").get(name, {}))


@lru_cache(maxsize=16)
def _load_draft_path(path: Path) -> DraftSpec:
    data, _ = load_mapping(path, "draft model")
    where = f"draft model config '{path}'"
    archs = data.get("architectures") or []
    if not any("Eagle3" in str(a) for a in archs if isinstance(archs, list)):
        raise BadInputError(
            f"{where}: architectures {archs} names no EAGLE-3 head (e.g. LlamaForCausalLMEagle3); moeplan models "
            "EAGLE-3 draft heads only (a model's own MTP layers need no draft model)."
        )
    meta = draft_source(path.stem) if path.parent == catalog_dir("drafts") else {}
    eagle = data.get("eagle_config") or {}
    aux = eagle.get("eagle_aux_hidden_state_layer_ids") or [0, 1, 2]  # EAGLE-3: low, middle and high layers
    layer_cfg = {k: v for k, v in data.items() if k not in ("eagle_config", "draft_vocab_size", "architectures")}
    layer_cfg["vocab_size"] = data.get("draft_vocab_size") or data.get("vocab_size")
    name = path.parent.name if path.name == "config.json" else path.stem  # a Hugging Face folder: its name
    try:
        fields = from_hf_config(layer_cfg, name)
        layer = ModelSpec.model_validate(fields)
        return DraftSpec(
            name=name,
            target=str(meta.get("target", "")) or "(user file)",
            checkpoint=str(meta.get("checkpoint", "")) or str(path.parent),
            layer=layer,
            aux_hidden_states=len(aux),
            embedding_vocab=int(data.get("vocab_size") or layer.vocab_size),
        )
    except (ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
        raise BadInputError(f"{where} cannot be read: {exc}.") from None


def load_draft(name_or_path: str) -> DraftSpec:
    """The draft model called `name_or_path` in the catalog (drafts/), or read from that config.json path."""
    return _load_draft_path(_resolve("drafts", name_or_path, "draft model").resolve())


def with_draft(model: ModelSpec, draft_name: str | None, field: str = "draft_model") -> ModelSpec:
    """`model` with the draft model `draft_name` beside it (unchanged for None).

    Refused by name: a draft whose hidden size or embedding vocabulary differs from the model's
    (its fc reads the model's hidden states and its embedding the model's token ids) and a model
    that has MTP layers of its own (one speculator per plan)."""
    if draft_name is None:
        return model
    draft = load_draft(draft_name)
    if model.mtp_layers:
        raise BadInputError(
            f"{field} = '{draft_name}': model '{model.name}' drafts with its own {model.mtp_layers} MTP layer(s); "
            f"drop {field} (its MTP layers draft with {'--mtp' if field.startswith('--') else 'mtp_tokens'})."
        )
    if draft.layer.hidden_size != model.hidden_size or draft.embedding_vocab != model.vocab_size:
        raise BadInputError(
            f"{field} = '{draft_name}': the draft reads hidden states of size {draft.layer.hidden_size} and token ids "
            f"of a {draft.embedding_vocab}-entry vocabulary; model '{model.name}' has {model.hidden_size} and "
            f"{model.vocab_size}; pick a draft trained for it (trained for: {draft.target})."
        )
    return model.model_copy(update={"draft": draft})


def load_plan_model(plan: Plan, base_dir: Path | None, resolve: Callable[[str, Path | None], str]) -> ModelSpec:
    """The model a plan names, with its draft model (`draft_model`) beside it; `resolve` turns a
    reference in the plan into a catalog name or a path (relative paths beside the plan)."""
    model = load_model(resolve(plan.model, base_dir))
    draft = resolve(plan.draft_model, base_dir) if plan.draft_model is not None else None
    return with_draft(model, draft)


# keys `plan --json` writes beside each plan's own fields: the engines that run it and its variants
EXPORT_ONLY_KEYS = frozenset({"runs_on", "cannot_run", "variants"})


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
        if isinstance(data, dict):  # what the export adds beside the plan (plan --json): not plan fields
            data = {k: v for k, v in data.items() if k not in EXPORT_ONLY_KEYS}
    else:
        if rank not in (None, 1):
            raise BadInputError(
                f"--rank {rank}: plan '{path}' holds a single plan; drop --rank or give a plan --json export."
            )
        source, text_for_lines = str(path), text
        if any(k in data for k in EXPORT_ONLY_KEYS):  # one plan cut out of a plan --json export
            data = {k: v for k, v in data.items() if k not in EXPORT_ONLY_KEYS}
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
