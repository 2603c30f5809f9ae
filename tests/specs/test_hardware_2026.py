"""Machines of 2026 (issue 13, part 2): Atlas 800I A3, Atlas 350, Atlas 950 SuperPoD; number formats."""

from __future__ import annotations

import json
from typing import get_args

import pytest

from planner.costmodel.context import CostContext
from planner.costmodel.memory import decode_hbm
from planner.costmodel.prefill import prefill_forward
from planner.errors import BadInputError
from planner.specs.catalog import catalog_names, load_hardware, load_model
from planner.specs.model import LayerKind
from planner.specs.plan import AttentionLayout, DecodePlan, MoELayout, ParallelLayout, PrefillPlan, Workload
from planner.specs.quantization import (
    FORMAT_BYTES,
    QUANTIZATION_SCHEMES,
    ModuleFormats,
    check_scheme_on_hardware,
    get_quantization,
)
from tests.conftest import run_cli

NEW = ("a3", "atlas350", "atlas950")


def test_catalog_lists_the_new_machines_with_status_and_sources():
    assert set(NEW) <= set(catalog_names("hardware"))
    r = run_cli("hardware", "list")
    assert r.exit_code == 0, r.output
    for name in NEW:
        assert name in r.output
    assert "announced" in r.output
    for name in NEW:
        hw = load_hardware(name)
        assert hw.peak_flops_per_s.source and hw.hbm_source and hw.status_source
        for lvl in hw.levels:
            assert lvl.source
    assert load_hardware("a3").status == "shipping"
    assert load_hardware("atlas350").status == "shipping"  # measured runs published (vllm-project/recipes #884)
    assert load_hardware("atlas950").status == "announced"


def test_a3_is_the_910c_die_of_cm384_with_its_own_links():
    a3, cm = load_hardware("a3"), load_hardware("cm384")
    # same silicon: per-die peaks and HBM; CloudMatrix384 holds the GEMM kernel figure measured on 910C
    assert a3.peak_flops_per_s.listed() == cm.peak_flops_per_s.listed()
    assert (a3.hbm_bytes, a3.hbm_bandwidth_bytes_per_s) == (cm.hbm_bytes, cm.hbm_bandwidth_bytes_per_s)
    assert cm.efficiency.matmul.fitted_on is None and "2506.12708" in cm.efficiency.matmul.source
    # the open engines' GEMMs are fitted on their own prefill rows (vllm-ascend's long-prompt TTFT ratios),
    # and reach less of the peak than CloudMatrix-Infer's; their prefill attention is the 910C MLA kernel figure
    assert a3.efficiency.matmul.fitted_on == "validation" and "910c-open" in a3.efficiency.matmul.source
    assert a3.efficiency.matmul.value < cm.efficiency.matmul.range.low
    assert a3.efficiency.prefill_attention_compute is not None
    assert a3.efficiency.prefill_attention_compute.value == cm.efficiency.attention_compute.value
    # the other factors are fitted apart: A3's rows are SGLang's and vllm-ascend's, CM384's Huawei's stack
    assert a3.efficiency.hbm_bandwidth.fitted_on == cm.efficiency.hbm_bandwidth.fitted_on == "validation"
    assert "910c-open" in a3.efficiency.hbm_bandwidth.source and "910c-huawei" in cm.efficiency.hbm_bandwidth.source
    # 8 packages = 16 dies of 64 GiB; SIO pairs, HCCS in the server and between the servers of a supernode
    # (DeepEP-Ascend has no other path between A3 servers), at most one 384-card supernode
    assert (a3.devices_per_card, a3.devices_per_node, a3.hbm_bytes) == (2, 16, 64 * 2**30)
    assert [lvl.devices_per_group for lvl in a3.levels] == [2, 16, None]
    assert a3.levels[0].bandwidth_bytes_per_s == pytest.approx(224e9)
    assert a3.levels[1].bandwidth_bytes_per_s == pytest.approx(196e9)
    assert a3.levels[2].bandwidth_bytes_per_s == pytest.approx(190e9)  # the supernode's, as cm384's UB
    assert a3.levels[2].latency_s > a3.levels[1].latency_s
    assert a3.max_devices == cm.max_devices == 768


def test_announced_figures_are_the_published_claims():
    pr, dt = load_hardware("atlas350").peak_flops_per_s, load_hardware("atlas950")
    # msmodeling 950PR profile: BF16 378 / FP8 756 / FP4 1512 TFLOPS (Ascend/msmodeling tensor_cast/device.py)
    assert (pr.bf16, pr.fp8, pr.mxfp4) == (378e12, 756e12, 1512e12)
    assert pr.int8 is None  # no INT8 peak published for 950
    # keynote: 1 PF FP8, 2 PF MXFP4, 144 GB at 4 TB/s, 8,192 chips
    assert (dt.peak_flops_per_s.fp8, dt.peak_flops_per_s.mxfp4) == (1e15, 2e15)
    assert dt.hbm_bytes == 144 * 2**30 and dt.hbm_bandwidth_bytes_per_s == 4e12 and dt.max_devices == 8192


def test_scheme_formats_and_bytes():
    q = get_quantization("w4a8")
    assert (q.attention.weight, q.attention.activation, q.attention.math) == ("int4", "int8", "int8")
    assert q.expert_weight_bytes == 0.5 and q.kv_bytes_per_element == 2
    mx = get_quantization("mxfp4")
    assert mx.expert_weight_bytes == pytest.approx(0.5 + 1 / 32)  # one E8M0 scale per 32 elements
    assert mx.math_formats() == {"attention": "mxfp8", "dense_ffn": "mxfp8", "experts": "mxfp8"}
    assert get_quantization("fp8-c8").kv_bytes_per_element == 1
    assert set(FORMAT_BYTES) >= {"fp8", "mxfp8", "mxfp4", "hif8", "int4"}
    # the report's scheme is unchanged
    a8 = get_quantization("a8w8c16")
    assert (a8.linear_weight_bytes, a8.expert_weight_bytes, a8.vocab_weight_bytes, a8.kv_bytes_per_element) == (
        1,
        1,
        2,
        2,
    )


def test_w4a16_keeps_the_shared_expert_in_bf16_and_counts_the_group_scales():
    q = get_quantization("w4a16")
    assert (q.experts.weight, q.experts.math) == ("int4g32", "bf16")
    assert q.expert_weight_bytes == pytest.approx(0.5 + 2 / 32)  # one BF16 scale per 32 INT4 weights
    assert q.shared_expert_weight_bytes == 2 and q.linear_weight_bytes == 2 and q.dispatch_bytes_per_element == 2
    assert "shared experts bf16/bf16" in q.summary()
    # the other schemes' shared experts take the routed experts' format
    a8w4 = get_quantization("a8w4c16")
    assert a8w4.shared_expert_weight_bytes == a8w4.expert_weight_bytes == 0.5
    with pytest.raises(ValueError, match="W4A16"):
        ModuleFormats(weight="int4g32", activation="int8")
    # the HBM a decode device holds for the shared expert is its BF16 copy
    m, hw = load_model("kimi-k2"), load_hardware("a3")
    ctx = CostContext(m, hw, q, Workload(input_tokens=1024, output_tokens=1024))
    plan = DecodePlan(
        devices=16,
        attention=AttentionLayout(dp=1, tp=16),
        moe=MoELayout(ep=16, slots_per_device=24),
        concurrency_per_device=0.0625,
    )
    shared = decode_hbm(ctx, plan).breakdown_bytes["shared_expert_weights"]
    assert float(shared[0]) == pytest.approx(m.moe.shared_experts * m.shared_expert_params() * 2 * m.num_moe_layers)


def test_a_format_the_chip_lacks_is_refused_naming_the_field():
    with pytest.raises(BadInputError, match=r"peak_flops_per_s\.fp8"):
        check_scheme_on_hardware(get_quantization("fp8"), load_hardware("a3"))
    with pytest.raises(BadInputError, match=r"peak_flops_per_s\.int8"):
        check_scheme_on_hardware(get_quantization("a8w8c16"), load_hardware("atlas350"))
    r = run_cli("plan", "--hardware", "a2", "--quantization", "mxfp4")
    assert r.exit_code == 2 and "peak_flops_per_s.mxfp8" in r.output
    # every shipped scheme runs somewhere in the catalog
    for name, scheme in QUANTIZATION_SCHEMES.items():
        assert any(
            all(load_hardware(h).peak_flops_per_s.get(f) for f in scheme.math_formats().values())
            for h in catalog_names("hardware")
        ), name


def test_the_cost_model_uses_the_matching_peak():
    m, hw = load_model("deepseek-v3"), load_hardware("atlas350")
    w = Workload(input_tokens=4096, output_tokens=512)
    fp4 = CostContext(m, hw, get_quantization("mxfp4-a4"), w)
    fp8 = CostContext(m, hw, get_quantization("mxfp8"), w)
    assert fp4.module_flops_per_s("experts") == pytest.approx(1512e12 * hw.efficiency.matmul.value)
    assert fp8.module_flops_per_s("experts") == pytest.approx(756e12 * hw.efficiency.matmul.value)
    assert fp4.module_flops_per_s("attention") == fp8.module_flops_per_s("attention")
    # a compute-bound prefill: expert time halves at twice the peak (weights barely matter at 64K tokens)
    phase = PrefillPlan(
        devices=32,
        attention=AttentionLayout(dp=32, tp=1),
        dense_ffn=ParallelLayout(dp=32, tp=1),
        moe=MoELayout(ep=32, slots_per_device=8),
        batch_tokens=65536,
    )
    e4 = prefill_forward(fp4, phase).breakdown_s["moe"][0]
    e8 = prefill_forward(fp8, phase).breakdown_s["moe"][0]
    assert 0.45 < e4 / e8 < 0.6


def test_planning_on_announced_hardware_warns_and_says_so_in_json(tmp_path):
    out = tmp_path / "p.json"
    r = run_cli(
        "plan",
        "--hardware",
        "atlas950",
        "--quantization",
        "fp8",
        "--max-cards",
        "64",
        "--structure",
        "pd",
        "--top",
        "1",
        "--engine",
        "none",
        "--json",
        str(out),
    )
    assert r.exit_code == 0, r.output
    assert "warning" in r.output and "vendor claims" in r.output
    doc = json.loads(out.read_text())
    assert any("announced" in n for n in doc["notes"])
    assert any("announced" in n for n in doc["plans"][0]["predicted"]["notes"])
    # and evaluate says it again
    single = tmp_path / "one.json"
    single.write_text(json.dumps(doc["plans"][0]))
    r = run_cli("evaluate", str(single))
    assert r.exit_code == 0 and "vendor claims" in r.output
    # shipping machines carry no announced note (A3 carries its known misses, validation/, a plan past
    # the loads its measured rows were taken at says so, and a prefill forward whose prompts do not divide
    # over its attention DP ranks says so)
    r = run_cli("plan", "--hardware", "a3", "--max-cards", "64", "--top", "1", "--engine", "none", "--json", "-")
    assert r.exit_code == 0
    notes = json.loads(r.output).get("notes", [])
    assert all(n.startswith(("known miss: on a3", "extrapolation: ", "prefill ranks: ")) for n in notes), notes
    assert not any("announced" in n for n in notes)


def test_plan_on_a3_for_deepseek_v3():
    r = run_cli("plan", "--model", "deepseek-v3", "--hardware", "a3", "--max-cards", "64", "--json", "-")
    assert r.exit_code == 0, r.output
    best = json.loads(r.output)["plans"][0]
    assert best["hardware"] == "a3"
    assert best["predicted"]["system"]["output_tokens_per_s_per_card"] > 0


def test_the_superpod_file_is_cm384s_hardware_with_vllm_ascends_factors():
    sp, cm, a3 = load_hardware("a3-superpod"), load_hardware("cm384"), load_hardware("a3")
    # the same machine: peaks, HBM, links, power
    assert sp.peak_flops_per_s.listed() == cm.peak_flops_per_s.listed()
    assert (sp.hbm_bytes, sp.hbm_bandwidth_bytes_per_s, sp.max_devices) == (
        cm.hbm_bytes,
        cm.hbm_bandwidth_bytes_per_s,
        cm.max_devices,
    )
    assert [(lvl.devices_per_group, lvl.bandwidth_bytes_per_s) for lvl in sp.levels] == [
        (lvl.devices_per_group, lvl.bandwidth_bytes_per_s) for lvl in cm.levels
    ]
    assert sp.power_w_per_card.value == cm.power_w_per_card.value
    # the open engines' kernel factors (taken from a3's group), its own HBM and sparse-attention cost
    assert sp.efficiency.attention_compute.value == a3.efficiency.attention_compute.value
    assert "910c-vllm-ascend" in sp.efficiency.hbm_bandwidth.source
    assert sp.fixed_costs.sparse_attention_per_sequence is not None
    assert cm.fixed_costs.sparse_attention_per_sequence is None
    # cm384 points vLLM-Ascend users at it; every catalog pointer names a real engine and machine
    assert cm.engine_machines == {"vllm-ascend": "a3-superpod"}
    from planner.engines.profiles import ENGINES, engine_name

    for name in catalog_names("hardware"):
        for engine, machine in load_hardware(name).engine_machines.items():
            assert engine_name(engine) == engine and engine in ENGINES
            assert load_hardware(machine).peak_flops_per_s.listed() == load_hardware(name).peak_flops_per_s.listed()


@pytest.mark.parametrize(("engine", "warned"), [("vllm-ascend", True), ("sglang", False)])
def test_planning_cm384_for_vllm_ascend_names_the_machine_fitted_on_its_runs(tmp_path, engine, warned):
    out = tmp_path / "p.json"
    r = run_cli(
        "plan",
        "--hardware",
        "cm384",
        "--phase",
        "decode",
        "--max-cards",
        "64",
        "--top",
        "1",
        "--engine",
        engine,
        "--json",
        str(out),
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    notes = doc.get("notes", [])  # (a plan file without notes leaves the key out)
    said = [n for n in notes if "--hardware a3-superpod" in n]
    assert bool(said) == warned, notes
    assert ("plan with --hardware a3-superpod" in r.output) == warned


def test_the_cann_recipes_file_is_cm384s_hardware_with_its_own_fitted_factors():
    cann, cm = load_hardware("a3-cann"), load_hardware("cm384")
    assert cann.peak_flops_per_s.listed() == cm.peak_flops_per_s.listed()
    assert [(lvl.devices_per_group, lvl.bandwidth_bytes_per_s) for lvl in cann.levels] == [
        (lvl.devices_per_group, lvl.bandwidth_bytes_per_s) for lvl in cm.levels
    ]
    # its weight reads, GEMMs and vector-operator cost are fitted on its own rows; the links are cm384's
    for factor in (cann.efficiency.hbm_bandwidth, cann.efficiency.matmul, cann.fixed_costs.vector_op):
        assert "910c-cann" in factor.source
    assert cann.efficiency.link_bandwidth.value == cm.efficiency.link_bandwidth.value
    # every catalog pointer by attention kind names a real machine of the same silicon
    for name in catalog_names("hardware"):
        for kind, machine in load_hardware(name).attention_machines.items():
            assert kind in get_args(LayerKind)
            assert load_hardware(machine).peak_flops_per_s.listed() == load_hardware(name).peak_flops_per_s.listed()


@pytest.mark.parametrize(
    ("model", "warned"), [("deepseek-v3.2", True), ("deepseek-v4-flash", True), ("deepseek-v3", False)]
)
def test_planning_cm384_for_a_sparse_attention_model_names_the_machine_that_measured_one(tmp_path, model, warned):
    """cm384's factors have no DSA or V4 run among their rows; the ones measured on that hardware are a3-cann's."""
    out = tmp_path / "p.json"
    r = run_cli(
        "plan", "--model", model, "--hardware", "cm384", "--phase", "decode", "--max-cards", "64", "--top", "1",
        "--engine", "none", "--json", str(out),
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    notes = json.loads(out.read_text()).get("notes", [])
    assert any("--hardware a3-cann" in n for n in notes) == warned, notes
    assert ("warning: hardware 'cm384': no measured run" in r.output) == warned
    if warned:
        kinds = {"deepseek-v3.2": "dsa", "deepseek-v4-flash": "csa, hca"}[model]
        assert any(f"with {kinds} attention layers" in n for n in notes), notes


def test_announced_hardware_says_whether_its_efficiencies_are_fitted():
    # atlas950's are fitted on CANN's V4 rows (group 950dt-cann); without a fitted factor the file's are assumed
    a950 = load_hardware("atlas950")
    assert "efficiencies are fitted on a few measured runs" in (a950.announced_warning() or "")
    eff = a950.efficiency
    factors = {n: getattr(eff, n) for n in type(eff).model_fields if getattr(eff, n) is not None}
    unfitted = {n: f.model_copy(update={"fitted_on": None}) for n, f in factors.items()}
    assumed = a950.model_copy(update={"efficiency": eff.model_copy(update=unfitted)})
    assert "its efficiencies are not measured" in (assumed.announced_warning() or "")
    assert load_hardware("atlas350").announced_warning() is None  # shipping: no warning


@pytest.mark.parametrize("row_id", ["CANN-A3 GLM-5 b256 64K", "CANN-A3 GLM-5.2 b64 64K"])
def test_the_glm_holdouts_on_cm384s_factors_come_out_far_too_fast(row_id):
    """The GLM rows of CANN's recipes (holdouts of a3-cann, checked within tolerance by test_published) on
    cm384's factors, Huawei's SuperKernel stack (docs/fidelity.md): over 25% fast, hence cm384's pointer."""
    from planner.costmodel.evaluate import evaluate_plan
    from planner.costmodel.fitting import metric_value
    from planner.costmodel.reference import condition_imbalance, published_rows
    from planner.specs.catalog import load_plan, plan_base_dir

    row = next(r for r in published_rows() if r.id == row_id)
    assert row.row.hardware == "a3-cann" and row.row.role == "holdout"
    plan, _ = load_plan(row.plan)
    on_cm384 = evaluate_plan(
        plan.model_copy(update={"hardware": "cm384"}), plan_base_dir(row.plan), condition_imbalance(row)
    )
    assert metric_value(on_cm384, row.metric) / row.published - 1 < -0.25


def test_auto_quantization_takes_the_first_scheme_every_machine_runs():
    from planner.specs.quantization import resolve_quantization

    a2, a950 = load_hardware("a2"), load_hardware("atlas950")
    assert resolve_quantization("auto", [a2]) == ("a8w8c16", None)
    name, note = resolve_quantization("auto", [a950])
    assert name == "fp8" and note is not None and "atlas950" in note
    # a mixed plan: A2 has no FP8 math, the 950 no INT8: only BF16 runs on both
    assert resolve_quantization("auto", [a2, a950])[0] == "bf16"
    assert resolve_quantization("w4a8", [a950]) == ("w4a8", None)  # a named scheme is the caller's to check
