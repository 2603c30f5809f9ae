"""`python -m planner` runs the same command-line interface as `moeplan`."""

from planner.cli.app import main

main()
