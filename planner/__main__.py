"""`python -m planner` runs the same command-line interface as `moeplan`.

A SIGTERM that arrives while the command modules are still being imported (about a second on a
busy machine) is remembered, not raised (raising inside a C extension's initialisation turns
into an ImportError), and ends the run with exit code 130 once the imports are done, like a stop
during the search (planner.cli.app.main installs the handler that raises).
"""

import signal
import sys
import threading

_stopped: list[int] = []


def _remember(signum: int, frame: object) -> None:
    _stopped.append(signum)


if threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGTERM, _remember)

from planner.cli.app import main  # noqa: E402

if _stopped:
    sys.stderr.write("interrupted before any plan was found; nothing written\n")
    raise SystemExit(130)
main()
