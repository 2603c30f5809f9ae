"""Command-line interface (typer): thin commands that call the planner and print reports."""
