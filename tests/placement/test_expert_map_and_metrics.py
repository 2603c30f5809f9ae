"""The vllm-ascend expert map round trip and its validation; metrics and nodes per token."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from planner.errors import BadInputError
from planner.placement.eplb import global_placement, hierarchical_placement
from planner.placement.expert_map import (
    moeplan_document,
    placement_from_mapping,
    read_expert_map,
    to_vllm_ascend,
    vllm_ascend_json,
)
from planner.placement.metrics import (
    Routing,
    imbalance,
    nodes_per_token,
    route_tokens,
)
from planner.placement.model import Placement, device_loads
from planner.placement.optimize import optimize_placement
from planner.placement.synthetic import generate_loads


@pytest.fixture(scope="module")
def placed() -> Placement:
    loads = generate_loads("zipf:1.1", 4, 256, seed=3)
    return optimize_placement(loads, 32, 9).placement


def test_vllm_ascend_map_has_exactly_the_documented_shape(placed):
    doc = json.loads(vllm_ascend_json(placed))
    assert set(doc) == {"moe_layer_count", "layer_list"}
    assert doc["moe_layer_count"] == 4
    for i, layer in enumerate(doc["layer_list"]):
        assert set(layer) == {"layer_id", "device_count", "device_list"}
        assert layer["layer_id"] == i and layer["device_count"] == 32
        for d, device in enumerate(layer["device_list"]):
            assert set(device) == {"device_id", "device_expert"}
            assert device["device_id"] == d and len(device["device_expert"]) == 9
            assert all(isinstance(e, int) for e in device["device_expert"])


def test_map_reloads_to_the_identical_placement(placed, tmp_path):
    path = tmp_path / "map.json"
    path.write_text(vllm_ascend_json(placed))
    back = read_expert_map(path, num_experts=256)
    assert back.same_as(placed)
    assert np.array_equal(back.replica_counts, placed.replica_counts)


def test_moeplan_json_also_reloads(placed):
    doc = json.loads(json.dumps(moeplan_document(placed, {"imbalance": [1.0] * 4})))
    assert placement_from_mapping(doc, "x").same_as(placed)
    assert doc["replica_counts"] == placed.replica_counts.tolist()


def test_shuffled_layers_and_devices_read_back_in_id_order(placed):
    doc = to_vllm_ascend(placed)
    doc["layer_list"].reverse()
    for layer in doc["layer_list"]:
        layer["device_list"].reverse()
    assert placement_from_mapping(doc, "x", 256).same_as(placed)


def _broken(placed, change):
    doc = copy.deepcopy(to_vllm_ascend(placed))
    change(doc)
    return doc


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("layer_list"), "missing key"),
        (lambda d: d.update(moe_layer_count=5), "moe_layer_count is 5 but layer_list has 4"),
        (lambda d: d["layer_list"][1].update(layer_id=0), "layer_id 0 appears twice"),
        (lambda d: d["layer_list"][0].update(device_count=31), "device_count is 31"),
        (
            lambda d: d["layer_list"][0]["device_list"][3]["device_expert"].pop(),
            "has 8 entries; every device must have the same number of slots",
        ),
        (
            lambda d: d["layer_list"][0]["device_list"][3].update(device_id=2),
            "device_id 2 appears twice",
        ),
        (
            lambda d: d["layer_list"][0]["device_list"][0]["device_expert"].__setitem__(0, 999),
            "out of range",
        ),
        (
            lambda d: d["layer_list"][0]["device_list"][0]["device_expert"].__setitem__(0, "7"),
            "must be a whole number",
        ),
    ],
)
def test_bad_maps_name_the_problem(placed, change, message):
    with pytest.raises(BadInputError, match=message):
        placement_from_mapping(_broken(placed, change), "map.json", 256)


def test_expert_twice_on_a_device_is_named():
    doc = {
        "moe_layer_count": 1,
        "layer_list": [
            {
                "layer_id": 0,
                "device_count": 2,
                "device_list": [
                    {"device_id": 0, "device_expert": [0, 1]},
                    {"device_id": 1, "device_expert": [0, 0]},
                ],
            }
        ],
    }
    with pytest.raises(BadInputError, match="device 1 holds expert 0 twice"):
        placement_from_mapping(doc, "m")


def test_missing_expert_is_named():
    ids = np.array([[[0, 1], [1, 2]]])
    with pytest.raises(BadInputError, match="no replica of expert"):
        placement_from_mapping(to_vllm_ascend(Placement(ids, 3)), "m", 4)


def test_map_that_is_not_json(tmp_path):
    path = tmp_path / "m.json"
    path.write_bytes(b"\x00\x01junk")
    with pytest.raises(BadInputError, match="not valid JSON"):
        read_expert_map(path)


def test_replicated_load_splits_evenly():
    ids = np.array([[[0, 1], [0, 2]]])
    p = Placement(ids, 3)
    loads = np.array([[10.0, 3.0, 1.0]])
    assert device_loads(loads, p).tolist() == [[8.0, 6.0]]
    assert imbalance(loads, p)[0] == pytest.approx(8.0 / 7.0)


def test_nodes_per_token_bounds_and_locality():
    routing = Routing(experts_per_token=8, n_group=8, topk_group=4)
    loads = generate_loads("lognormal:1.0", 6, 256, seed=1)
    hier = hierarchical_placement(loads, 32, 9, 4, 8)
    flat = global_placement(loads, 32, 9)
    reach_hier = nodes_per_token(loads, hier, 4, routing)
    reach_flat = nodes_per_token(loads, flat, 4, routing)
    assert ((reach_hier >= 1) & (reach_hier <= 4)).all()
    assert (reach_hier < reach_flat).all()  # whole groups on one node reach fewer nodes
    assert (nodes_per_token(loads, flat, 1, routing) == 1).all()
    assert np.array_equal(reach_flat, nodes_per_token(loads, flat, 4, routing))  # seeded


def test_routes_respect_groups_and_distinct_experts():
    routing = Routing(experts_per_token=8, n_group=8, topk_group=4)
    loads = generate_loads("zipf:1.1", 2, 256, seed=0)
    routes = route_tokens(loads, routing, tokens=300, seed=1)
    for layer in range(2):
        for row in routes.experts[layer]:
            assert len(set(row.tolist())) == 8
            assert len(set((row // 32).tolist())) <= 4
    share = np.bincount(routes.experts[0].ravel(), minlength=256) / routes.experts[0].size
    assert np.corrcoef(share, loads[0])[0, 1] > 0.9


def test_routing_checks():
    with pytest.raises(BadInputError):
        Routing(8, 7, 4).check(256)
    with pytest.raises(BadInputError):
        Routing(8, 8, 9).check(256)
    with pytest.raises(BadInputError):
        Routing(300, 1, 1).check(256)
