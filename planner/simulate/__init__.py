"""The serving simulator: a plan's instances driven by benchmark-client traffic, event by event.

The simulator owns events and queues (`engine`, `instances`), the traffic (`traffic`, `tracefile`)
and the engines' routing (`routing`); every step, forward and transfer time it needs comes from the
cost model through `predictor`, which evaluates the cost model's own functions once over a grid of
batch sizes and context lengths (the Vidur / BLIS split: the simulator asks a separate predictor,
never a second copy of its formulas). `metrics` turns the per-request records into the figures the
benchmark clients print (`vllm bench serve`'s names), `build` makes a simulation from a plan.

Layering: after the cost model (it imports specs, engines and costmodel), before candidates.
"""
