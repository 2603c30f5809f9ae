"""Engine conformance harness: every emitted launch command and config through the engines' own code.

    MOEPLAN_CONFORMANCE=1 python benchmarks/engine_conformance/run.py [--cache DIR] [--engines E,...]
        [--json FILE] [--write-docs] [--keep DIR]

Opt-in (it installs two large virtual environments, once, into the cache folder; see envs.py):
without MOEPLAN_CONFORMANCE=1 it says how to run it and exits 0.

For every plan of the fixed set (plans.py) and every engine, the plan is exported with
`moeplan`'s own export code (`--emit`); a plan the engine cannot run must be refused naming the
field (recorded as such). Each export is then run through:

- vLLM-Ascend: vLLM 0.25.1 (the version vllm-ascend v0.25.1rc1 pins) and vllm-ascend 0.25.1rc1
  from PyPI, on vLLM's CPU platform (check_vllm.py): the `vllm serve` parser,
  `create_engine_config`, vllm-ascend's `AscendConfig`, its expert-map loader;
- SGLang: sglang 0.5.23 and sglang-router 0.3.2 from PyPI (check_sglang.py): `prepare_server_args`,
  the resolution pipeline, `check_server_args`, the router's parser;
- MindIE: no package index carries MindIE-LLM or MindIE Motor, so their load-time rules are
  data read from the public source (planner/engines/data/mindie_rules.yaml, each with file and
  line), applied by planner/engines/conformance.py to every config.json, ranktable and
  ms_coordinator.json. If MINDIE_CONFIG_CHECK names an executable (a local build of MindIE-LLM's
  config_manager that takes a config.json path; never part of this repository), every
  config.json also goes through it, with the model folder and ranktable it needs.

Node placeholders become loopback addresses (NODEi_ADDR -> 127.0.0.(i+1)), the model path a
local folder with the model's config.json, as a launcher would substitute them. Prints one line
per plan and engine and a summary; exits 1 if an engine's code refuses anything moeplan wrote.
`--write-docs` records the result (versions and table) in docs/engines.md's marked block and in
benchmarks/engine_conformance/result.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

import envs  # noqa: E402

RESULT = HERE / "result.json"
DOCS = REPO / "docs" / "engines.md"
BEGIN, END = "<!-- conformance-result -->", "<!-- /conformance-result -->"
ENGINE_ORDER = ("vllm-ascend", "sglang", "mindie")


def loopback(text: str) -> str:
    """Placeholders as a launcher on loopback test hosts would fill them."""
    text = re.sub(r"NODE(\d+)_DEVICE(\d+)_IP", lambda m: f"198.18.{int(m.group(1))}.{int(m.group(2)) + 1}", text)
    return re.sub(r"NODE(\d+)_ADDR", lambda m: f"127.0.0.{int(m.group(1)) + 1}", text)


def model_folder(cache: Path, name: str) -> Path:
    """A stand-in for the weights folder: the model's own config.json (its FP8 quantization_config
    dropped: the launch files load ModelSlim W8A8 weights, whose config carries none)."""
    from planner.specs.catalog import catalog_dir

    folder = cache / "models" / name
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o750)
    doc = json.loads((catalog_dir("models") / f"{name}.json").read_text())
    doc.pop("quantization_config", None)
    target = folder / "config.json"
    target.write_text(json.dumps(doc, indent=1))
    os.chmod(target, 0o640)
    return folder


def draft_folder(cache: Path, name: str) -> Path:
    """A stand-in for a draft model's weights folder: its catalog config.json (drafts/)."""
    from planner.specs.catalog import catalog_dir

    folder = cache / "drafts" / name
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o750)
    target = folder / "config.json"
    target.write_text((catalog_dir("drafts") / f"{name}.json").read_text())
    os.chmod(target, 0o640)
    return folder


def _local_paths(plan_doc: dict, cache: Path) -> list[tuple[str, str]]:
    """(hub id, local folder) pairs to substitute in an export: the model's, and its draft model's."""
    from planner.report.launch.common import draft_model_path, model_path
    from planner.specs.plan import Plan

    plan = Plan.model_validate(plan_doc)
    out = [(model_path(plan), str(model_folder(cache, plan.model)))]
    draft = draft_model_path(plan)
    if draft is not None and plan.draft_model is not None:
        out.append((draft, str(draft_folder(cache, plan.draft_model))))
    return out


def _localised(text: str, pairs: list[tuple[str, str]]) -> str:
    for hub, local in pairs:
        text = text.replace(hub, local)
    return text


def export_all(plans: dict, engines: tuple[str, ...], out: Path) -> dict[tuple[str, str], dict]:
    """Export every plan for every engine: {(plan, engine): {"dir"} or {"refused": message}}."""
    from planner.errors import BadInputError
    from planner.report.launch import emit
    from planner.specs.catalog import load_hardware, load_model, with_draft

    done = {}
    for name, plan in plans.items():
        for engine in engines:
            target = out / name / engine
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                model = with_draft(load_model(plan.model), plan.draft_model)
                emit(engine, plan, model, load_hardware(plan.hardware), target)
            except BadInputError as exc:
                done[(name, engine)] = {"refused": str(exc)}
                continue
            done[(name, engine)] = {"dir": target}
    return done


def cases_for(engine: str, name: str, folder: Path, cache: Path) -> list[dict]:
    doc = json.loads((folder / "launch.json").read_text())
    plan = json.loads((folder / "plan.json").read_text())
    pairs = _local_paths(plan, cache)
    from planner.specs.plan import Plan

    out = []
    for p in doc["processes"]:
        argv = [_localised(loopback(a), pairs) for a in p["argv"]]
        env = {k: loopback(v) for k, v in p["env"].items()}
        out.append({"id": f"{name}/{p['role']}{p['instance']}/node{p['node']}", "argv": argv, "env": env})
    # the engine's benchmark client command of bench/ (vLLM's for vLLM-Ascend, SGLang's for SGLang)
    # (the closed loop, and the run at a request rate)
    from planner.report.launch.bench import bench_commands

    client = {"vllm-ascend": "vllm", "sglang": "sglang"}.get(engine)
    if client is not None:
        for suffix, rate in (("", None), ("-rate", 12.5)):
            commands = bench_commands(Plan.model_validate(plan), rate)
            argv = [_localised(a.replace("$ROUTER", "http://127.0.0.1:8000"), pairs) for a in commands[client]]
            out.append({"id": f"{name}/bench/{client}{suffix}", "argv": argv, "env": {}})
    return out


def proxy_check(case: dict) -> dict:
    """vLLM-Ascend's PD proxy is an example script outside the wheel: its command line is parsed with
    the argparse flags read from it (planner/engines/data/vllm_ascend.yaml `router`)."""
    from planner.engines.profiles import load_profile

    spec = load_profile("vllm-ascend").router
    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    for flag, kind in spec.flags.items():
        parser.add_argument(flag, nargs="+" if kind.value == "list" else None)
    argv = case["argv"]
    if argv[: len(spec.launcher)] != spec.launcher:
        return {"id": case["id"], "ok": False, "error": f"launcher {argv[:2]}"}
    try:
        args, extra = parser.parse_known_args(argv[len(spec.launcher) :])
    except (argparse.ArgumentError, SystemExit) as exc:
        return {"id": case["id"], "ok": False, "error": str(exc)}
    hosts = (len(args.prefiller_hosts or []), len(args.decoder_hosts or []))
    ports = (len(args.prefiller_ports or []), len(args.decoder_ports or []))
    ok = not extra and hosts == ports and min(hosts) > 0
    return {"id": case["id"], "ok": ok, "error": "" if ok else f"unparsed {extra} or hosts {hosts} / ports {ports}"}


def run_checker(engine: str, python: Path, cases: list[dict], work: Path, hbm_mib: int = 65536) -> list[dict]:
    script = HERE / ("check_vllm.py" if engine == "vllm-ascend" else "check_sglang.py")
    src, dst = work / f"{engine}-cases.json", work / f"{engine}-results.json"
    src.write_text(json.dumps(cases))
    proc = subprocess.run(
        [str(python), str(script), str(src), str(dst), str(hbm_mib)], capture_output=True, text=True, check=False
    )
    if proc.returncode or not dst.exists():
        raise SystemExit(f"conformance: {script.name} failed:\n{proc.stderr[-3000:]}")
    return json.loads(dst.read_text())


def mindie_check(name: str, folder: Path, cache: Path) -> list[dict]:
    """MindIE's rules (data) on the export, and MINDIE_CONFIG_CHECK's loader on each config.json."""
    from planner.engines.conformance import export_problems

    doc = json.loads((folder / "launch.json").read_text())
    files = {p.name: p.read_text() for p in folder.iterdir() if p.is_file()}
    modes = {p.name: p.stat().st_mode & 0o777 for p in folder.iterdir() if p.is_file()}
    problems = export_problems("mindie", files, doc["processes"], modes)
    results = [{"id": f"{name}/rules", "ok": not problems, "error": " | ".join(problems)}]
    loader = os.environ.get("MINDIE_CONFIG_CHECK")
    if not loader:
        return results
    plan = json.loads((folder / "plan.json").read_text())
    weights = model_folder(cache, plan["model"])
    from planner.report.launch.common import model_path
    from planner.specs.plan import Plan

    hf = model_path(Plan.model_validate(plan))
    work = Path(tempfile.mkdtemp(prefix="mindie-", dir=cache))
    seen = set()
    for p in doc["processes"]:
        if p["role"] == "router":
            continue
        config = Path(p["env"]["MIES_CONFIG_JSON_PATH"]).name
        if (config, p["node"]) in seen:
            continue
        seen.add((config, p["node"]))
        target = work / f"node{p['node']}-{config}"
        target.write_text(loopback(files[config]).replace(hf, str(weights)))
        os.chmod(target, 0o640)
        env = {**os.environ, **{k: loopback(v) for k, v in p["env"].items()}}
        if "RANK_TABLE_FILE" in env:
            table = work / Path(env["RANK_TABLE_FILE"]).name
            table.write_text(loopback(files[table.name]))
            os.chmod(table, 0o640)
            env["RANK_TABLE_FILE"] = str(table)
        proc = subprocess.run([loader, str(target)], capture_output=True, text=True, env=env, check=False)
        lines = [line for line in proc.stdout.splitlines() if line.strip()]
        ok = proc.returncode == 0
        results.append(
            {
                "id": f"{name}/{p['role']}{p['instance']}/node{p['node']}/loader",
                "ok": ok,
                "error": "" if ok else " | ".join(lines[-4:]),
            }
        )
    shutil.rmtree(work, ignore_errors=True)
    return results


def render(result: dict) -> str:
    """The docs block: versions, then one row per plan with each engine's verdict."""
    lines = ["Run with `MOEPLAN_CONFORMANCE=1 python benchmarks/engine_conformance/run.py --write-docs`", ""]
    lines.append("| engine | checked with |")
    lines.append("|---|---|")
    for engine in ENGINE_ORDER:
        if engine in result["versions"]:
            lines.append(f"| {engine} | {result['versions'][engine]} |")
    lines += ["", "| plan | " + " | ".join(result["engines"]) + " |", "|---" * (1 + len(result["engines"])) + "|"]
    for name, row in result["plans"].items():
        lines.append(f"| {name} | " + " | ".join(row[e] for e in result["engines"]) + " |")
    lines += ["", f"Summary: {result['summary']}"]
    return "\n".join(lines) + "\n"


def write_docs(result: dict) -> None:
    RESULT.write_text(json.dumps(result, indent=1) + "\n")
    text = DOCS.read_text()
    block = f"{BEGIN}\n{render(result)}{END}"
    if BEGIN in text:
        text = re.sub(re.escape(BEGIN) + r".*?" + re.escape(END), lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip() + "\n\n## Conformance: the exports through the engines' own code\n\n" + block + "\n"
    DOCS.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", help="venvs and model folders (default ~/.cache/moeplan/conformance)")
    parser.add_argument("--engines", default=",".join(ENGINE_ORDER))
    parser.add_argument("--json", help="write the per-case results here")
    parser.add_argument("--write-docs", action="store_true", help="record the result in docs/engines.md")
    parser.add_argument("--keep", help="export into this folder and keep it")
    parser.add_argument("--no-search", action="store_true", help="only the written-out plans (faster)")
    args = parser.parse_args(argv)
    if os.environ.get("MOEPLAN_CONFORMANCE") != "1":
        print(
            "engine conformance: opt-in; run with MOEPLAN_CONFORMANCE=1 (installs vLLM and SGLang once into "
            f"{envs.cache_dir(args.cache)})"
        )
        return 0
    os.environ.setdefault("MOEPLAN_CACHE_DIR", "off")
    engines = tuple(e.strip() for e in args.engines.split(",") if e.strip())
    cache = envs.cache_dir(args.cache)
    started = time.perf_counter()
    pythons = {e: envs.ensure(envs.ENVS[e], cache) for e in engines if e in envs.ENVS}
    from plans import fixed_plans

    plans = fixed_plans(searched=not args.no_search)
    out = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="moeplan-conformance-"))
    if args.keep and out.exists():
        shutil.rmtree(out)
    exports = export_all(plans, engines, out)
    cases: dict[str, list[dict]] = {e: [] for e in engines}
    for (name, engine), done in exports.items():
        if "dir" in done and engine in pythons:
            cases[engine] += cases_for(engine, name, done["dir"], cache)
    results: dict[str, list[dict]] = {}
    for engine, python in pythons.items():
        servers = cases[engine]
        if engine == "vllm-ascend":
            proxies = [c for c in servers if c["argv"][0] != "vllm"]
            servers = [c for c in servers if c["argv"][0] == "vllm"]
        results[engine] = run_checker(engine, python, servers, out) if servers else []
        if engine == "vllm-ascend":
            results[engine] += [proxy_check(c) for c in proxies]
    if "mindie" in engines:
        results["mindie"] = []
        for (name, engine), done in exports.items():
            if engine == "mindie" and "dir" in done:
                results["mindie"] += mindie_check(name, done["dir"], cache)
    table: dict[str, dict[str, str]] = {}
    failed = 0
    accepted = 0
    for name in plans:
        row = {}
        for engine in engines:
            done = exports[(name, engine)]
            if "refused" in done:
                field = done["refused"].split("cannot run this plan: ", 1)[-1].split(":")[0]
                row[engine] = f"refused by moeplan ({field})"
                continue
            mine = [r for r in results[engine] if r["id"].startswith(f"{name}/")]
            bad = [r for r in mine if not r["ok"]]
            failed += len(bad)
            accepted += len(mine) - len(bad)
            if bad:
                row[engine] = f"REFUSED: {bad[0]['id'].split('/', 1)[1]}: {bad[0].get('error', '')[:160]}"
            else:
                row[engine] = f"accepted ({len(mine)} checks)"
        table[name] = row
        print(f"{name:22s} " + " | ".join(f"{e}: {row[e]}" for e in engines))
    versions = {}
    if "vllm-ascend" in pythons:
        v = envs.installed_versions(pythons["vllm-ascend"], ("vllm", "vllm-ascend", "torch"))
        versions["vllm-ascend"] = f"vllm {v['vllm']}, vllm-ascend {v['vllm-ascend']} (torch {v['torch']}, CPU platform)"
    if "sglang" in pythons:
        v = envs.installed_versions(pythons["sglang"], ("sglang", "sglang-router", "torch"))
        versions["sglang"] = f"sglang {v['sglang']}, sglang-router {v['sglang-router']} (torch {v['torch']})"
    if "mindie" in engines:
        from planner.engines.conformance import mindie_rules

        rel = mindie_rules()["release"]
        loader = " and a local build of its config_manager" if os.environ.get("MINDIE_CONFIG_CHECK") else ""
        versions["mindie"] = f"rules read from {rel['mindie_llm']} and {rel['mindie_motor']}{loader}"
    summary = (
        f"{accepted} checks accepted by the engines' code, {failed} refused; "
        f"{sum('refused' in d for d in exports.values())} plan/engine pairs refused by moeplan naming the field; "
        f"{time.perf_counter() - started:.0f} s"
    )
    print(summary)
    result = {"engines": list(engines), "versions": versions, "plans": table, "summary": summary}
    if args.json:
        Path(args.json).write_text(json.dumps({"result": result, "cases": results}, indent=1))
    if args.write_docs:
        write_docs(result)
    if not args.keep:
        shutil.rmtree(out, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
