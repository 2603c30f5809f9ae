"""Run vLLM-Ascend launch commands through vLLM's and vLLM-Ascend's own code (inside their venv).

    <venv>/bin/python check_vllm.py CASES.json RESULTS.json

Runs in the conformance venv (vllm from PyPI at the version vllm-ascend pins, vllm-ascend's wheel
installed without its NPU dependencies), never in moeplan's. For every case (a `vllm serve` argv
with the node addresses and model path already substituted) it does what `vllm serve` does up to
the point where devices are needed:

1. the real `vllm serve` parser (`vllm.entrypoints.cli.serve`), with the one change vLLM-Ascend's
   platform makes to it: `NPUPlatform.pre_register_and_update` appends 'ascend' to the
   `--quantization` choices (vllm_ascend/platform.py, v0.25.1rc1);
2. `ServeSubcommand.validate` and the load-balancing checks of `ServeSubcommand.cmd`;
3. `AsyncEngineArgs.from_cli_args(args).create_engine_config(...)`: every vLLM config object
   (model, cache, parallel, scheduler, speculative, KV transfer, compilation) built and checked;
4. vLLM-Ascend's own `AscendConfig(vllm_config)` (vllm_ascend/ascend_config.py): the
   `--additional-config` (eplb_config, finegrained_tp_config, ...) as the plugin reads it;
5. the expert map as vLLM-Ascend loads it (`eplb_utils.expert_file_to_tensor` for every MoE layer)
   and the capacity check of `AscendMoERunner` (ops/fused_moe/fused_moe.py, "EPLB local expert
   capacity mismatch"): (experts + redundant) / EP slots per rank, equal to the map's.

The platform is vLLM's CPU platform (no NPU here). What the missing plugin would register and is
needed before any device exists is registered by calling the plugin's own functions
(`vllm_ascend.distributed.kv_transfer.register_connector` for MooncakeConnectorV1) or, where those
import torch_npu, by the smallest stand-in: the 'ascend' quantization name (a QuantizationConfig
subclass that only names itself; vLLM checks the name, the NPU kernels behind it load later).
Plugin auto-loading is off (VLLM_PLUGINS=''): the plugin's entry points import torch_npu.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import traceback
import types
from pathlib import Path

os.environ["VLLM_PLUGINS"] = ""  # the Ascend entry points import torch_npu; registered by hand below
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import vllm.platforms as platforms  # noqa: E402
from vllm.platforms.cpu import CpuPlatform  # noqa: E402

platforms._current_platform = CpuPlatform()  # before any module binds current_platform


class _NoNPU(types.ModuleType):
    """`torch_npu` as an empty module: vllm_ascend/utils.py imports it at the top (for kernels used
    later); anything that actually needs the NPU fails loudly here instead of being faked."""

    def __getattr__(self, name: str):
        raise RuntimeError(f"torch_npu.{name} needs an NPU (not available to the conformance check)")


def _import_plugin_modules() -> None:
    """Import the plugin modules the checks call with `torch_npu` present only during the import
    (transformers probes for torch_npu later and must keep finding none)."""
    sys.modules["torch_npu"] = _NoNPU("torch_npu")
    try:
        import vllm_ascend.ascend_config  # noqa: F401
        import vllm_ascend.eplb.core.eplb_utils  # noqa: F401
        import vllm_ascend.utils  # noqa: F401
    finally:
        del sys.modules["torch_npu"]


ASCEND_QUANTIZATION = "ascend"


def _register_ascend_names() -> None:
    """What the vLLM-Ascend plugin registers before devices exist, by its own functions where they
    do not need torch_npu."""
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS, register_quantization_config
    from vllm.model_executor.layers.quantization.base_config import QuantizationConfig

    if ASCEND_QUANTIZATION not in QUANTIZATION_METHODS:

        @register_quantization_config(ASCEND_QUANTIZATION)
        class _AscendName(QuantizationConfig):  # stand-in: vllm_ascend.quantization needs torch_npu
            @classmethod
            def get_name(cls):
                return ASCEND_QUANTIZATION

            @classmethod
            def get_supported_act_dtypes(cls):
                import torch

                return [torch.bfloat16, torch.float16]

            @classmethod
            def get_min_capability(cls):
                return 0

            @classmethod
            def get_config_filenames(cls):
                return []

            @classmethod
            def from_config(cls, config):
                return cls()

            def get_quant_method(self, layer, prefix):
                return None

    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1, SupportsHMA
    from vllm_ascend.distributed.kv_transfer import register_connector  # the plugin's own registration

    register_connector()

    class _MooncakeConnectorName(KVConnectorBase_V1, SupportsHMA):
        """Stand-in with the bases of vllm_ascend's MooncakeConnector (kv_p2p/mooncake_connector.py:
        `class MooncakeConnector(KVConnectorBase_V1, SupportsHMA)`), whose module imports torch_npu;
        VllmConfig only asks the class whether it supports the hybrid memory allocator."""

    KVConnectorFactory._registry["MooncakeConnectorV1"] = lambda: _MooncakeConnectorName


def _parser():
    from vllm.entrypoints.cli import serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    sub = parser.add_subparsers(required=False, dest="subparser")
    cmd = serve.cmd_init()[0]
    serve_parser = cmd.subparser_init(sub)
    action = serve_parser._option_string_actions["--quantization"]
    if action.choices is not None and ASCEND_QUANTIZATION not in action.choices:
        action.choices.append(ASCEND_QUANTIZATION)  # NPUPlatform.pre_register_and_update
    return parser, cmd


def _lb_mode_checks(args) -> None:
    """The checks `ServeSubcommand.cmd` makes before it starts anything (vllm/entrypoints/cli/serve.py)."""
    if args.headless and args.api_server_count is not None and args.api_server_count > 0:
        raise ValueError("--api-server-count cannot be used with --headless")
    external = args.data_parallel_external_lb or args.data_parallel_rank is not None
    hybrid = args.data_parallel_start_rank is not None and not args.data_parallel_multi_port_external_lb
    if sum([bool(args.data_parallel_multi_port_external_lb), external, hybrid]) > 1:
        raise ValueError("Cannot use more than one data parallel load balancing mode.")
    if args.headless and not args.data_parallel_size_local:
        raise ValueError("data_parallel_size_local must be > 0 in headless mode")  # run_headless


def _expert_map(vllm_config, ascend_config) -> dict:
    """Load the map the way vLLM-Ascend does and repeat AscendMoERunner's capacity check."""
    eplb = ascend_config.eplb_config
    if not eplb.expert_map_path:
        return {}
    from vllm_ascend.eplb.core.eplb_utils import expert_file_to_tensor

    hf = vllm_config.model_config.hf_config
    # DeepSeek's config names the routed experts n_routed_experts, Qwen3-MoE's num_experts
    experts = getattr(hf, "n_routed_experts", None) or hf.num_experts
    moe_layers = hf.num_hidden_layers - (getattr(hf, "first_k_dense_replace", None) or 0)
    ep = vllm_config.parallel_config.tensor_parallel_size * vllm_config.parallel_config.data_parallel_size
    counts = set()
    for layer in range(moe_layers):
        placement, physical = expert_file_to_tensor(eplb.expert_map_path, layer)
        if placement.shape[0] != ep:
            raise ValueError(f"expert map layer {layer}: {placement.shape[0]} devices, EP is {ep}")
        counts.add(physical)
    if len(counts) != 1:
        raise ValueError(f"expert map: physical expert counts differ between layers: {sorted(counts)}")
    redundant = counts.pop() - experts
    allocated = (experts + eplb.num_redundant_experts) // ep  # vLLM allocates with the configured count
    expected = (experts + redundant) // ep  # AscendMoERunner: from the map
    if (experts + redundant) % ep or allocated != expected:
        raise ValueError(
            f"EPLB local expert capacity mismatch: allocated={allocated}, placement={expected} "
            f"(num_redundant_experts {eplb.num_redundant_experts}, map {redundant})"
        )
    return {"moe_layers": moe_layers, "redundant": redundant, "slots_per_rank": expected}


def check(argv: list[str], env: dict[str, str]) -> dict:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.usage.usage_lib import UsageContext
    from vllm_ascend.ascend_config import AscendConfig

    assert argv[0] == "vllm", argv[:2]
    parser, cmd = _parser()
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = parser.parse_args(argv[1:])
    except SystemExit:
        return {"ok": False, "stage": "parse", "error": err.getvalue().strip().splitlines()[-1]}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        cmd.validate(args)
        if getattr(args, "model_tag", None) is not None:
            args.model = args.model_tag
        _lb_mode_checks(args)
        engine_args = AsyncEngineArgs.from_cli_args(args)
        config = engine_args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER, headless=args.headless)
        ascend = AscendConfig(config)
        experts = _expert_map(config, ascend)
    except Exception as exc:  # the engine's refusal, reported
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        where = f"{os.path.relpath(tb.filename, os.path.dirname(os.path.dirname(tb.filename)))}:{tb.lineno}"
        return {"ok": False, "stage": "config", "error": f"{type(exc).__name__}: {exc}", "where": where}
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    par, sched = config.parallel_config, config.scheduler_config
    return {
        "ok": True,
        "tp": par.tensor_parallel_size,
        "dp": par.data_parallel_size,
        "dp_local": par.data_parallel_size_local,
        "max_num_seqs": sched.max_num_seqs,
        "max_num_batched_tokens": sched.max_num_batched_tokens,
        "speculative": config.speculative_config.num_speculative_tokens if config.speculative_config else 0,
        "kv_role": config.kv_transfer_config.kv_role if config.kv_transfer_config else None,
        "compilation_mode": str(config.compilation_config.cudagraph_mode),
        **experts,
    }


def check_bench(argv: list[str]) -> dict:
    """`vllm bench serve` (a bench/ script's command): vLLM's own benchmark parser
    (vllm/benchmarks/serve.py add_cli_args, with its dataset arguments)."""
    from vllm.benchmarks.serve import add_cli_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    assert argv[:3] == ["vllm", "bench", "serve"], argv[:3]
    parser = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = parser.parse_args(argv[3:])
    except SystemExit:
        return {"ok": False, "stage": "parse", "error": err.getvalue().strip().splitlines()[-1]}
    return {
        "ok": bool(args.save_result) and args.dataset_name == "random",
        "max_concurrency": args.max_concurrency,
        "num_prompts": args.num_prompts,
        "random_input_len": args.random_input_len,
        "random_output_len": args.random_output_len,
    }


def main() -> None:
    cases = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    _register_ascend_names()
    _import_plugin_modules()
    out = []
    for case in cases:
        with contextlib.redirect_stdout(io.StringIO()):
            if case["argv"][:2] == ["vllm", "bench"]:
                result = check_bench(case["argv"])
            else:
                result = check(case["argv"], case.get("env", {}))
        out.append({"id": case["id"], **result})
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
