"""Specs: pydantic descriptions of hardware, models, quantization, workloads and plans."""
