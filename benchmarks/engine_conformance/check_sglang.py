"""Run SGLang launch commands through SGLang's own code (inside its venv).

    <venv>/bin/python check_sglang.py CASES.json RESULTS.json

Runs in the conformance venv (sglang and sglang-router from PyPI), never in moeplan's. For every
case it does what `python -m sglang.launch_server` does before it touches a device:
`prepare_server_args(argv)` (sglang/srt/server_args.py: the real parser and `ServerArgs`),
`ServerArgs.resolve_once()` (the resolution pipeline of sglang/srt/arg_groups: every hook that
derives and checks settings, among them the attention-DP division of --chunked-prefill-size) and
`ServerArgs.check_server_args()` (arg_groups/validation_hook.py). Deprecation warnings are
collected: a launch file that leans on a deprecated flag fails the check, and so does one with an
`--enable-*` switch that the resolution turns off (the server would not run as written). Router command lines go
through `sglang_router.launch_router.parse_router_args`.

The device is an Ascend NPU, which this machine lacks; SGLang reads the NPU's page size and
memory only in hooks that the record marks, so the case's own environment is applied and the
resolution runs on the CPU.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import sys
import traceback
import warnings
from pathlib import Path

ANSI = re.compile(r"\x1b\[[0-9;]*m")


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _where(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    frames = [f for f in tb if "sglang" in f.filename] or tb
    f = frames[-1]
    return f"{f.filename.split('site-packages/')[-1]}:{f.lineno}"


def _as_npu(hbm_mib: int) -> None:
    """Stand in for the facts an Ascend NPU would report: the platform is an NPU (SGLang's own
    `override_platform`, sglang/srt/runtime_context.py) and its HBM is `hbm_mib` (what
    `get_npu_memory_capacity` reads from torch_npu; sglang/srt/utils/common.py)."""
    import sglang.srt.hardware_backend.npu.utils as npu_utils
    import sglang.srt.utils.common as common
    from sglang.srt.runtime_context import override_platform

    override_platform(is_npu=True, is_cuda=False, is_hip=False, is_xpu=False, is_musa=False, is_mps=False).install()
    common.is_npu.cache_clear()
    for module in (common, npu_utils):
        module.get_npu_memory_capacity = lambda: hbm_mib


def check_server(argv: list[str], env: dict[str, str]) -> dict:
    from sglang.srt.server_args import prepare_server_args

    assert argv[:3] == ["python", "-m", "sglang.launch_server"], argv[:3]
    collect = _Collect()
    logging.getLogger().addHandler(collect)
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                args = prepare_server_args(argv[3:])
            except SystemExit:
                return {"ok": False, "stage": "parse", "error": err.getvalue().strip().splitlines()[-1]}
            args.resolve_once()
            args.check_server_args()
        # a deprecation about a flag of this command line (others come from SGLang's own defaults)
        flags = {a.split("=")[0] for a in argv if a.startswith("--")}
        messages = collect.messages + [str(w.message) for w in caught] + err.getvalue().splitlines()
        deprecated = [m for m in messages if "eprecated" in m and any(f"'{f}'" in m or f" {f} " in m for f in flags)]
        if deprecated:
            return {"ok": False, "stage": "deprecated", "error": ANSI.sub("", deprecated[0])}
        from sglang.srt.arg_groups.overrides import resolving_view

        cfg = resolving_view(args)
        # a switch of this command line that SGLang's resolution turned off (a hook's declare_resolution, as its
        # speculative hooks do to --enable-mixed-chunk): the server would not run as the launch says
        dropped = sorted(
            f for f in flags if f.startswith("--enable-") and getattr(cfg, f[2:].replace("-", "_"), None) is False
        )
        if dropped:
            return {"ok": False, "stage": "resolve", "error": f"{', '.join(dropped)} turned off by SGLang's resolution"}
        return {
            "ok": True,
            "tp": cfg.tp_size,
            "attn_dp": cfg.attn_dp_size,
            "dp": cfg.dp_size,
            "ep": cfg.ep_size,
            "page_size": cfg.page_size,
            "chunked_prefill_size": cfg.chunked_prefill_size,
            "enable_mixed_chunk": cfg.enable_mixed_chunk,
            "max_running_requests": cfg.max_running_requests,
            "disaggregation_mode": cfg.disaggregation_mode,
        }
    except Exception as exc:  # the engine's refusal, reported
        return {"ok": False, "stage": "resolve", "error": f"{type(exc).__name__}: {exc}", "where": _where(exc)}
    finally:
        logging.getLogger().removeHandler(collect)
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def check_router(argv: list[str]) -> dict:
    from sglang_router.launch_router import parse_router_args

    assert argv[:3] == ["python", "-m", "sglang_router.launch_router"], argv[:3]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = parse_router_args(argv[3:])
    except SystemExit:
        return {"ok": False, "stage": "parse", "error": err.getvalue().strip().splitlines()[-1]}
    except Exception as exc:
        return {"ok": False, "stage": "router", "error": f"{type(exc).__name__}: {exc}", "where": _where(exc)}
    return {
        "ok": True,
        "pd_disaggregation": args.pd_disaggregation,
        "prefill": [list(map(str, u)) if isinstance(u, tuple) else u for u in args.prefill_urls],
        "decode": list(args.decode_urls),
    }


def check_bench(argv: list[str]) -> dict:
    """`python -m sglang.benchmark.serving` (a bench/ script's command): SGLang's own `cli_main`
    parses it and its checks run; the benchmark itself (`run_benchmark`) is replaced by a recorder."""
    import sglang.benchmark.serving as serving

    assert argv[:3] == ["python", "-m", "sglang.benchmark.serving"], argv[:3]
    seen: dict = {}
    real_run, real_argv = serving.run_benchmark, sys.argv
    serving.run_benchmark = lambda args: seen.setdefault("args", args)
    sys.argv = ["sglang.benchmark.serving", *argv[3:]]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            serving.cli_main()
    except SystemExit:
        return {"ok": False, "stage": "parse", "error": err.getvalue().strip().splitlines()[-1]}
    finally:
        serving.run_benchmark, sys.argv = real_run, real_argv
    args = seen["args"]
    return {
        "ok": args.output_file is not None and args.dataset_name == "random",
        "max_concurrency": args.max_concurrency,
        "num_prompts": args.num_prompts,
        "random_range_ratio": args.random_range_ratio,
    }


def main() -> None:
    cases = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    _as_npu(int(sys.argv[3]) if len(sys.argv) > 3 else 65536)
    out = []
    for case in cases:
        with contextlib.redirect_stdout(io.StringIO()):
            if case["argv"][2] == "sglang_router.launch_router":
                result = check_router(case["argv"])
            elif case["argv"][2] == "sglang.benchmark.serving":
                result = check_bench(case["argv"])
            else:
                result = check_server(case["argv"], case.get("env", {}))
        out.append({"id": case["id"], **result})
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
