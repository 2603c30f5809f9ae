"""Redundant-expert placement: which logical expert sits in which slot of which device.

Pure library (numpy only). The plan search calls `imbalance_for` (fast) and `lower_bound_for`;
`moeplan experts` calls `study.run_study`, which uses `optimize_placement` and the EPLB baselines.
"""

from planner.placement.eplb import global_placement, hierarchical_placement
from planner.placement.expert_map import read_expert_map, to_vllm_ascend, vllm_ascend_json
from planner.placement.loads import ExpertLoads, from_array, read_expert_loads, read_loads
from planner.placement.metrics import (
    Routing,
    imbalance,
    lower_bound,
    lower_bound_for,
    nodes_per_token,
    slot_aware_lower_bound,
)
from planner.placement.model import Placement, device_loads, slot_loads
from planner.placement.optimize import (
    FAST_SEARCH,
    FULL_SEARCH,
    OptimizeResult,
    SearchSettings,
    imbalance_for,
    optimize_placement,
)
from planner.placement.synthetic import generate_loads, parse_trace_spec

__all__ = [
    "FAST_SEARCH",
    "FULL_SEARCH",
    "ExpertLoads",
    "OptimizeResult",
    "Placement",
    "Routing",
    "SearchSettings",
    "device_loads",
    "from_array",
    "generate_loads",
    "global_placement",
    "hierarchical_placement",
    "imbalance",
    "imbalance_for",
    "lower_bound",
    "lower_bound_for",
    "nodes_per_token",
    "optimize_placement",
    "parse_trace_spec",
    "read_expert_loads",
    "read_expert_map",
    "read_loads",
    "slot_aware_lower_bound",
    "slot_loads",
    "to_vllm_ascend",
    "vllm_ascend_json",
]
