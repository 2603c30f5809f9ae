"""`python -m planner` runs the same command-line interface as `moeplan`.

SIGTERM becomes KeyboardInterrupt from the first line, before the command modules are imported
(about a second on a busy machine): a stop during start-up then exits 130 without a traceback,
like a stop during the search (planner.cli.app.main).
"""

import signal
import sys
import threading


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGTERM, _terminate)
try:
    from planner.cli.app import main
except KeyboardInterrupt:
    sys.stderr.write("interrupted before any plan was found; nothing written\n")
    raise SystemExit(130) from None

main()
