"""OR-Tools CP-SAT's Python API, imported without pandas.

`ortools.sat.python.cp_model` (OR-Tools 9.15, cp_model.py: `import pandas as pd` at module level)
imports pandas only for its `*_series` helpers (`new_int_var_series`, `new_bool_var_series`,
interval-variable series) and for type annotations of those helpers. moeplan never calls them,
and importing pandas costs about 200 ms of every `moeplan plan`. So when pandas is not imported
yet, cp_model is imported with a stand-in module named `pandas` whose `Index` and `Series` are
empty classes (nothing is ever an instance of them), and the stand-in is removed from
`sys.modules` right after: a later `import pandas` anywhere still gets the real pandas. If pandas
is already imported, cp_model simply uses it. `MOEPLAN_REAL_PANDAS=1` turns the stand-in off.
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any

_cp_model: Any = None


def cp_model() -> Any:
    """The `ortools.sat.python.cp_model` module (imported once, on first use)."""
    global _cp_model
    if _cp_model is not None:
        return _cp_model
    if "pandas" in sys.modules or os.environ.get("MOEPLAN_REAL_PANDAS"):
        from ortools.sat.python import cp_model as module
    else:
        stand_in = types.ModuleType("pandas", "stand-in while ortools' cp_model is imported (see planner.search.cpsat)")
        stand_in.Index = type("Index", (), {})  # type: ignore[attr-defined]
        stand_in.Series = type("Series", (), {})  # type: ignore[attr-defined]
        sys.modules["pandas"] = stand_in
        try:
            from ortools.sat.python import cp_model as module
        finally:
            if sys.modules.get("pandas") is stand_in:
                del sys.modules["pandas"]
    _cp_model = module
    return module
