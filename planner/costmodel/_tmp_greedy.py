"""TEMPORARY greedy placement used until planner.placement lands (to be deleted)."""
import heapq
import numpy as np

def imbalance_for(loads, devices, slots):
    out = []
    for row in np.asarray(loads, float):
        E = row.size
        rep = np.ones(E, int)
        heap = [(-row[e], e) for e in range(E)]
        heapq.heapify(heap)
        for _ in range(devices * slots - E):
            v, e = heapq.heappop(heap)
            rep[e] += 1
            heapq.heappush(heap, (-row[e] / rep[e], e))
        items = sorted(((row[e] / rep[e]) for e in range(E) for _ in range(rep[e])), reverse=True)
        load = np.zeros(devices); cnt = np.zeros(devices, int)
        for w in items:
            cand = np.where(cnt < slots)[0]
            d = cand[np.argmin(load[cand])]
            load[d] += w; cnt[d] += 1
        out.append(load.max() / load.mean())
    return np.array(out)
