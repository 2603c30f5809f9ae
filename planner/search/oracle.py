"""Exhaustive enumerators: the oracles the CP-SAT model is checked against on small spaces.

`best_deployment_ratio` tries every decode/prefill candidate pair and every instance count within
the budget; `best_phase_ratio` tries every module-layout combination, MTP depth or micro-batch
count, and concurrency or batch of one instance size with plain loops over the integer tables.
Neither uses numpy broadcasting or the solver, so they check both.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

from planner.candidates.phase_candidates import EMITTED_SCALE, OVERLAP_SCALE
from planner.candidates.tables import MODULES, IntTables, PhaseTables


def best_deployment_ratio(
    decode_rates: list[int],
    decode_devices: list[int],
    prefill_rates: list[int],
    prefill_devices: list[int],
    budget: int,
) -> Fraction:
    """Highest served rate per device over every choice and count (0 if nothing fits)."""
    best = Fraction(0)
    d_opts: list[tuple[int | None, int]] = list(zip(decode_rates, decode_devices, strict=True)) or [(None, 0)]
    p_opts: list[tuple[int | None, int]] = list(zip(prefill_rates, prefill_devices, strict=True)) or [(None, 0)]
    for (dr, dd), (pr, pd) in itertools.product(d_opts, p_opts):
        for n in range(1 if dr is not None else 0, (budget // dd if dd else 0) + 1):
            for m in range(1 if pr is not None else 0, (budget // pd if pd else 0) + 1):
                devices = n * dd + m * pd
                if devices == 0 or devices > budget:
                    continue
                caps = []
                if dr is not None:
                    caps.append(n * dr)
                if pr is not None:
                    caps.append(m * pr)
                ratio = Fraction(min(caps), devices)
                best = max(best, ratio)
    return best


def best_phase_ratio(
    t: PhaseTables,
    ints: IntTables,
    slo_us: int | None,
    layers: int = 1,
    overlap_efficiency: float = 1.0,
) -> Fraction:
    """Best throughput ratio (num/den as in planner.candidates) of one instance size, by loops."""
    best = Fraction(0)
    ranges = [range(t.n_options(mod)) for mod in MODULES]
    for combo in itertools.product(*ranges):
        for j, k in enumerate(t.k_values):
            for xi, x in enumerate(t.x_values.tolist()):
                hbm = sum(int(ints.hbm_mib[mod][o, j, xi]) for mod, o in zip(MODULES, combo, strict=True))
                if hbm > ints.hbm_capacity_mib:
                    continue
                if t.phase == "decode":
                    e = int(t.emitted[j] * EMITTED_SCALE + 1e-9)
                    step = sum(int(ints.time_us[mod][o, j, xi]) for mod, o in zip(MODULES, combo, strict=True))
                    step += int(ints.const_us[j, xi])
                    if slo_us is not None and step * EMITTED_SCALE > slo_us * e:
                        continue
                    best = max(best, Fraction(x * e, step))
                else:
                    c = sum(int(ints.time_us[mod][o, 0, xi]) for mod, o in zip(MODULES, combo, strict=True))
                    mm = sum(int(ints.comm_us[mod][o, 0, xi]) for mod, o in zip(MODULES, combo, strict=True))
                    f = sum(int(ints.fixed_us[mod][o, 0, 0]) for mod, o in zip(MODULES, combo, strict=True))
                    hidden = 0
                    if k > 1:
                        factor = int(overlap_efficiency * (1.0 - 1.0 / (k * layers)) * OVERLAP_SCALE)
                        hidden = factor * min(c, mm) // OVERLAP_SCALE
                    forward = c + mm + k * f - hidden
                    kv = int(ints.const_us.reshape(-1)[0])
                    if slo_us is not None and -(-(3 * forward + 2 * kv) // 2) > slo_us:
                        continue
                    best = max(best, Fraction(x, forward))
    return best
