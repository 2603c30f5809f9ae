"""Reading loads files (CSV, JSON, .npy) with messages that name the problem; synthetic traces."""

from __future__ import annotations

import json

import numpy as np
import pytest

from planner.errors import BadInputError
from planner.placement.loads import from_array, read_expert_loads, read_loads
from planner.placement.synthetic import cap_popularity, generate_loads, parse_trace_spec


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_plain_csv_with_header_and_comments(tmp_path):
    path = write(tmp_path, "l.csv", "# measured\ne0,e1,e2\n1,2,3\n\n4,5,6\n")
    loads = read_expert_loads(path)
    assert loads.windows.shape == (1, 2, 3) and not loads.windowed
    assert read_loads(path).tolist() == [[1, 2, 3], [4, 5, 6]]


def test_csv_with_window_and_layer_columns(tmp_path):
    text = "window,layer,a,b\n0,0,1,2\n0,1,3,4\n1,0,5,6\n1,1,7,8\n"
    loads = read_expert_loads(write(tmp_path, "w.csv", text))
    assert loads.windows.shape == (2, 2, 2)
    assert loads.window(1).tolist() == [[5, 6], [7, 8]]
    assert read_loads(write(tmp_path, "w2.csv", text)).shape == (2, 2, 2)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1,2,3\n1,2\n", "line 2 has 2 values; expected 3"),
        ("1,2,3\n1,x,3\n", "line 2, column 2: 'x' is not a number"),
        ("1,2,3\n1,nan,3\n", "line 2, column 2 is NaN"),
        ("1,2,3\n1,inf,3\n", "line 2, column 2 is infinite"),
        ("1,2,3\n1,-4,3\n", "line 2, column 2 is -4; loads are token counts"),
        ("1,2,3,\n", r"column 4: '\(empty\)' is not a number"),
        ("# nothing\n\n", "no data rows"),
        ("   \n", "empty"),
        ("window,a,b\n0,1,2\n2,3,4\n", "window 2 where window 1 was expected"),
        ("window,a,b\n0,1,2\n0,1,2\n1,3,4\n", "window 1 has 1 layers; expected 2"),
        ("layer,a,b\n0,1,2\n2,3,4\n", "layer 2 where layer 1 was expected"),
        ("e0,e1\n", "header but no data rows"),
    ],
)
def test_bad_csv_names_line_and_fix(tmp_path, text, message):
    with pytest.raises(BadInputError, match=message):
        read_expert_loads(write(tmp_path, "bad.csv", text))


def test_json_forms(tmp_path):
    assert read_loads(write(tmp_path, "a.json", "[[1,2],[3,4]]")).shape == (2, 2)
    assert read_loads(write(tmp_path, "b.json", '{"loads": [[[1,2]],[[3,4]]]}')).shape == (2, 1, 2)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[1,2],[3]]", r"\[1\] has 1 values; expected 2"),
        ('[[1,"a"]]', r"\[0\]\[1\] is \"a\""),
        ("[[1,2],[3,-1]]", "layer 1 expert 1 is -1"),
        ("[]", "non-empty list"),
        ('{"load": []}', 'without a "loads" key'),
        ("[[1,2]", "not valid JSON"),
        ("[[[1,2]],[[1,2],[3,4]]]", "has 2 layers; expected 1"),
        ("[[1e999, 1]]", "is infinite"),
        ("[[true, 1]]", "must be a number"),
    ],
)
def test_bad_json(tmp_path, text, message):
    with pytest.raises(BadInputError, match=message):
        read_expert_loads(write(tmp_path, "bad.json", text))


def test_npy_and_its_errors(tmp_path):
    good = tmp_path / "g.npy"
    np.save(good, np.arange(12.0).reshape(3, 4))
    assert read_loads(good).shape == (3, 4)
    one_d = tmp_path / "one.npy"
    np.save(one_d, np.arange(4.0))
    with pytest.raises(BadInputError, match="1 dimension"):
        read_loads(one_d)
    junk = tmp_path / "junk.npy"
    junk.write_bytes(b"\x93NUMPY\x00\xff garbage" * 10)
    with pytest.raises(BadInputError, match="not a readable .npy"):
        read_loads(junk)
    empty = tmp_path / "empty.npy"
    empty.write_bytes(b"")
    with pytest.raises(BadInputError, match="empty"):
        read_loads(empty)
    strings = tmp_path / "s.npy"
    np.save(strings, np.array([["a", "b"]]))
    with pytest.raises(BadInputError, match="numbers"):
        read_loads(strings)


def test_binary_junk_as_csv_is_refused(tmp_path):
    path = tmp_path / "junk.csv"
    path.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(BadInputError, match="not UTF-8"):
        read_loads(path)


def test_missing_file(tmp_path):
    with pytest.raises(BadInputError, match="does not exist"):
        read_loads(tmp_path / "nope.csv")


def test_all_zero_layer_becomes_uniform_and_is_reported():
    loads = from_array([[0, 0, 0], [1, 2, 3]], "x")
    assert loads.window(0).tolist() == [[1, 1, 1], [1, 2, 3]]
    assert loads.uniform_layers == [(0, 0)]


def test_trace_spec_parser():
    assert str(parse_trace_spec("zipf:1.1")) == "zipf:1.1"
    assert parse_trace_spec(" LogNormal:0.5 ").kind == "lognormal"
    for bad, message in [
        ("zipf", "not a trace spec"),
        ("pareto:1", "not a trace spec"),
        ("zipf:x", "not a number"),
        ("zipf:0", "must be > 0"),
        ("lognormal:9", "<= 5"),
    ]:
        with pytest.raises(BadInputError, match=message):
            parse_trace_spec(bad)


def test_synthetic_is_deterministic_and_shaped():
    a = generate_loads("zipf:1.1", 4, 64, windows=3, seed=7)
    b = generate_loads("zipf:1.1", 4, 64, windows=3, seed=7)
    c = generate_loads("zipf:1.1", 4, 64, windows=3, seed=8)
    assert a.shape == (3, 4, 64) and np.array_equal(a, b) and not np.array_equal(a, c)
    assert np.allclose(a.sum(axis=2), 16384 * 8)
    one = generate_loads("lognormal:1.0", 2, 16, tokens_per_layer=100, experts_per_token=4)
    assert one.shape == (2, 16) and np.allclose(one.sum(axis=1), 400)


def test_windows_drift_but_stay_related():
    loads = generate_loads("lognormal:1.0", 20, 256, windows=2, seed=1)
    corr = np.mean([np.corrcoef(loads[0, i], loads[1, i])[0, 1] for i in range(20)])
    assert 0.8 < corr < 0.9999


def test_popularity_cap_keeps_every_expert_under_one_over_top_k():
    p = cap_popularity(np.array([[100.0, 1, 1, 1, 1, 1, 1, 1, 1, 1]]), 0.25)
    assert p.max() <= 0.25 + 1e-12 and p.sum() == pytest.approx(1.0)


def test_json_dump_of_a_synthetic_trace_reads_back(tmp_path):
    loads = generate_loads("zipf:1.0", 3, 8, seed=0)
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"loads": loads.tolist()}))
    assert np.array_equal(read_loads(path), loads)
