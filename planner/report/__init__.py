"""Reports: rich tables for the terminal, JSON documents, plots."""
