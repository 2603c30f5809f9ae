"""Ranking and explaining plans: what binds each plan, what-if comparisons, Pareto frontiers.

Solver-free: everything here works on plans the search returned (or a user wrote) and on the
cost model, so it can explain any plan, not only the search's own.
"""
