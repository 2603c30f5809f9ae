"""The persistent memo of the skew model's placement imbalance returns what the code computes."""

from __future__ import annotations

import json

from planner.costmodel import disk_memo, imbalance


def test_memo_round_trip_and_same_values(tmp_path, monkeypatch):
    monkeypatch.setenv("MOEPLAN_CACHE_DIR", str(tmp_path))
    memo = disk_memo.DiskMemo("test-memo")
    assert memo.get("a") is None
    memo.put("a", 1.25)
    memo.flush()
    files = list(tmp_path.glob("test-memo-*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text()) == {"a": 1.25}
    again = disk_memo.DiskMemo("test-memo")
    assert again.get("a") == 1.25

    # the skew model through the memo: same value computed fresh and read back
    monkeypatch.setattr(imbalance, "_SKEW_MEMO", disk_memo.DiskMemo("skew-test"))
    imbalance._skew_static.cache_clear()
    fresh = imbalance._skew_static(0.3, 256, 32, 9)
    imbalance._SKEW_MEMO.flush()
    imbalance._skew_static.cache_clear()
    monkeypatch.setattr(imbalance, "_SKEW_MEMO", disk_memo.DiskMemo("skew-test"))
    assert imbalance._SKEW_MEMO.get("0.3,256,32,9") == fresh
    assert imbalance._skew_static(0.3, 256, 32, 9) == fresh
    imbalance._skew_static.cache_clear()


def test_memo_off_and_unwritable_folder_are_harmless(tmp_path, monkeypatch):
    monkeypatch.setenv("MOEPLAN_CACHE_DIR", "off")
    memo = disk_memo.DiskMemo("x")
    memo.put("k", 2.0)
    memo.flush()
    assert memo.get("k") == 2.0
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("MOEPLAN_CACHE_DIR", str(blocker / "sub"))
    memo = disk_memo.DiskMemo("y")
    memo.put("k", 3.0)
    memo.flush()  # cannot create the folder: ignored
    assert memo.get("k") == 3.0
