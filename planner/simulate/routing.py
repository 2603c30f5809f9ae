"""How each engine spreads requests over instances and over the DP ranks of an instance.

Two decisions, each `round-robin`, `least-loaded` or `random`, as the engines make them (read from
their source or documentation, cited per entry):

- instances (the PD proxy or router in front of the prefill and decode instances): which prefill
  instance and which decode instance a request goes to, decided when it arrives;
- DP ranks (inside an instance whose attention is data-parallel): which rank's queue a request
  joins when it reaches the decode instance. Its rank keeps it until it ends; each rank admits
  from its own queue up to its share of the seats and of the KV cache. Prefill DP ranks are not
  told apart: a prefill instance forms its batches from one queue.

`least-loaded` counts what the engine counts: vLLM's DP balancer scores a rank by waiting x 4 +
running; the PD proxies by the tokens they have in flight on an instance. `random` is SGLang's
`--mini-lb` router (python/sglang/srt/disaggregation/mini_lb.py, `MiniLoadBalancer.select_pair`:
`random.choice` of a prefill and a decode server), which its Ascend best-practice runs use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from planner.errors import BadInputError

Policy = Literal["round-robin", "least-loaded", "random"]
POLICIES: tuple[Policy, ...] = ("round-robin", "least-loaded", "random")


@dataclass(frozen=True)
class Routing:
    """The two routing decisions of one engine, with where each was read."""

    engine: str
    instances: Policy
    dp_ranks: Policy
    instances_source: str
    dp_source: str

    def describe(self) -> str:
        """One line for the report."""
        return (
            f"routing ({self.engine}): instances {self.instances} ({self.instances_source}); "
            f"DP ranks {self.dp_ranks} ({self.dp_source})"
        )

    def with_overrides(self, instances: str | None, dp_ranks: str | None) -> Routing:
        """The routing with `--route-instances` / `--route-dp` applied (the source then says 'given')."""
        out = self
        for flag, value, field in (("--route-instances", instances, "instances"), ("--route-dp", dp_ranks, "dp_ranks")):
            if value is None:
                continue
            if value not in POLICIES:
                raise BadInputError(f"{flag}: '{value}' is not one of {', '.join(POLICIES)}.")
            source_field = "instances_source" if field == "instances" else "dp_source"
            out = Routing(**{**out.__dict__, field: value, source_field: "given on the command line"})
        return out


ENGINE_ROUTING: dict[str, Routing] = {
    "vllm-ascend": Routing(
        engine="vllm-ascend",
        instances="least-loaded",
        dp_ranks="least-loaded",
        instances_source=(
            "vllm-ascend examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py: prefillers and "
            "decoders in a min-heap by the tokens in flight, the least loaded popped"
        ),
        dp_source=(
            "vLLM vllm/v1/engine/core_client.py DPLBAsyncMPClient.get_core_engine_for_request: the rank with the "
            "least waiting x 4 + running"
        ),
    ),
    "sglang": Routing(
        engine="sglang",
        instances="least-loaded",
        dp_ranks="round-robin",
        instances_source=(
            "sglang-router PD mode, default policy cache_aware: random prompts share no prefix, so it balances by "
            "load (shortest queue once loads diverge past its thresholds)"
        ),
        dp_source=(
            "SGLang python/sglang/srt/server_args.py _handle_load_balance_method (main@001067fffe33): "
            "load_balance_method 'auto' is round_robin for PD decode and non-PD servers"
        ),
    ),
    "mindie": Routing(
        engine="mindie",
        instances="least-loaded",
        dp_ranks="round-robin",
        instances_source=(
            "MindIE Motor 2.3.0 docs (servicedeploy, Overview): the coordinator sends a request to the "
            "prefill/decode instance with the lowest load"
        ),
        dp_source=(
            "MindIE-LLM v3.0.0 (8b4871ad) src/engine/llm_engine.cpp LlmEngine::AddRequest: (rrIdx++) % DP ranks, "
            "load and prompt length ignored; across nodes its LoadBalancer's only policy is round robin "
            "(src/load_balance/round_robin_policy.cpp)"
        ),
    ),
}
DEFAULT_ENGINE = "vllm-ascend"


def engine_routing(engine: str | None) -> Routing:
    """The routing of `engine` (default vllm-ascend); an unknown name is refused naming the choices."""
    key = (engine or DEFAULT_ENGINE).strip().lower().replace("_", "-")
    if key not in ENGINE_ROUTING:
        raise BadInputError(f"--engine: unknown engine '{engine}'; choose one of {', '.join(ENGINE_ROUTING)}.")
    return ENGINE_ROUTING[key]
