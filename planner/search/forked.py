"""Searches in forked worker processes: what `moeplan sweep`'s points and `moeplan plan`'s engine searches
share when they run side by side.

A forked worker inherits the parent's imports and warmed cost tables copy-on-write (nothing is pickled on
the way in); only its result is pickled back. Fork is used only where it is the platform's safe default
(Linux), and never from a worker (a pool's workers are daemons, which may not fork pools of their own).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys

# worker processes by default: up to 2 cores (a search keeps a core busy; CP-SAT's own threads are short)
DEFAULT_JOBS = max(1, min(2, os.cpu_count() or 1))


def can_fork() -> bool:
    """Forked workers inherit the cost tables for free; only where fork is the safe default, and not from a
    pool's worker."""
    return (
        sys.platform.startswith("linux")
        and "fork" in multiprocessing.get_all_start_methods()
        and not multiprocessing.current_process().daemon
    )


def quiet_worker() -> None:
    """Workers leave Ctrl-C to the parent (which terminates them) and die quietly on SIGTERM."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def flush_table_store() -> None:
    """Write the on-disk cost-table store's pending entries (a pool worker ends without running exit
    handlers, and the parent flushes before forking so the workers do not write its entries again)."""
    from planner.candidates.table_store import table_store

    store = table_store()
    if store is not None:
        store.flush()


def fork_pool(processes: int):  # -> multiprocessing.pool.Pool
    """A pool of `processes` forked workers (`quiet_worker`)."""
    return multiprocessing.get_context("fork").Pool(processes, quiet_worker)


def end_pool(pool, completed: bool) -> None:
    """Let a pool's workers finish and exit when every task `completed`; else (an interrupt) kill them. Then
    wait for them."""
    if completed:
        pool.close()
    else:
        pool.terminate()
    pool.join()
