"""The conformance harness's own virtual environments, cached outside the repository.

One venv per engine, made once under the cache folder (`--cache`, default
`~/.cache/moeplan/conformance`, or `MOEPLAN_CONFORMANCE_CACHE`) and reused while its pins stay the
same (a marker file records them). Everything comes from the package index by name:

- vLLM-Ascend: `vllm` at the version vllm-ascend v0.25.1rc1 pins (its Dockerfile: `VLLM_TAG=v0.25.1`)
  and the `vllm-ascend` 0.25.1rc1 wheel itself, both without their dependency lists (they pin CUDA
  and NPU builds of torch: torch==2.11.0, torch-npu==2.10.0.post2), then vLLM's pure-Python
  dependencies and a CPU torch.
- SGLang: `sglang` 0.5.23 and `sglang-router` 0.3.2 without their dependency lists (CUDA
  kernels), their pure-Python dependencies, and torch 2.14.1 with torchvision 0.29.1 (the torch
  SGLang pins; SGLang's config module imports torchvision).

torch comes from the machine's own copy where pip finds one (a pip constraint may cap the
version); `--no-deps` installs print pip's complaints about the CUDA packages left out, which
the harness does not need: it stops before any kernel runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_CACHE = Path.home() / ".cache" / "moeplan" / "conformance"


@dataclass(frozen=True)
class EnvSpec:
    """One engine's venv: what is installed without dependencies, then with them."""

    name: str
    torch: tuple[str, ...]
    no_deps: tuple[str, ...]
    deps: tuple[str, ...] = field(default_factory=tuple)

    def marker(self) -> dict:
        return {"torch": list(self.torch), "no_deps": list(self.no_deps), "deps": list(self.deps)}


VLLM = EnvSpec(
    name="vllm-0.25.1",
    torch=("torch==2.13.0",),
    no_deps=("vllm==0.25.1", "vllm-ascend==0.25.1rc1"),
    # vllm 0.25.1's Requires-Dist less the CUDA-only packages (flashinfer, cutlass, tilelang, ...)
    deps=(
        "regex",
        "cachetools",
        "psutil",
        "sentencepiece",
        "numpy",
        "requests>=2.26.0",
        "tqdm",
        "blake3",
        "py-cpuinfo",
        "transformers>=5.5.3",
        "tokenizers>=0.21.1",
        "safetensors>=0.6.2",
        "protobuf>=5.29.6,!=6.30.*,!=6.31.*,!=6.32.*",
        "fastapi[standard]>=0.133.0,<0.137.0",
        "starlette>=1.0.1",
        "aiohttp>=3.13.3",
        "openai>=2.0.0",
        "pydantic>=2.12.0",
        "prometheus_client>=0.18.0",
        "pillow",
        "prometheus-fastapi-instrumentator>=8.0.0",
        "tiktoken>=0.6.0",
        "lm-format-enforcer==0.11.3",
        "llguidance>=1.7.0,<1.8.0",
        "outlines_core==0.2.14",
        "diskcache==5.6.3",
        "lark==1.2.2",
        "xgrammar>=0.2.1,<1.0.0",
        "typing_extensions>=4.10",
        "filelock>=3.16.1",
        "partial-json-parser",
        "jsonschema>=4.23.0",
        "pyzmq>=25.0.0",
        "msgspec",
        "mistral_common[image]>=1.11.5",
        "opencv-python-headless>=4.13.0",
        "pyyaml",
        "einops",
        "compressed-tensors==0.17.0",
        "depyf==0.20.0",
        "cloudpickle",
        "watchfiles",
        "python-json-logger",
        "ninja",
        "pybase64",
        "cbor2",
        "ijson",
        "setproctitle",
        "openai-harmony>=0.0.3",
        "anthropic>=0.71.0",
        "model-hosting-container-standards>=0.1.14,<1.0.0",
        "mcp",
        "opentelemetry-sdk>=1.27.0",
        "opentelemetry-api>=1.27.0",
        "opentelemetry-exporter-otlp>=1.27.0",
        "opentelemetry-semantic-conventions-ai>=0.4.1",
        "numba==0.65.0",
    ),
)

SGLANG = EnvSpec(
    name="sglang-0.5.23",
    torch=("torch==2.14.1", "torchvision==0.29.1"),
    no_deps=("sglang==0.5.23", "sglang-router==0.3.2"),
    # sglang 0.5.23's Requires-Dist less the CUDA kernels and multimedia extras
    deps=(
        "aiohttp",
        "anthropic>=0.20.0",
        "blobfile==3.0.0",
        "build",
        "compressed-tensors==0.18.0",
        "datasets",
        "distro",
        "easydict",
        "einops",
        "fastapi",
        "gguf",
        "interegular",
        "IPython",
        "llguidance>=1.7.6,<2.0.0",
        "mistral_common>=1.11.5",
        "modelscope",
        "msgspec",
        "ninja",
        "numpy",
        "openai==2.8.0",
        "openai-harmony==0.0.4",
        "orjson",
        "outlines==0.1.11",
        "packaging",
        "partial_json_parser",
        "pillow",
        "prometheus-client>=0.20.0",
        "psutil",
        "pybase64",
        "pydantic",
        "python-dateutil<3",
        "python-multipart",
        "pyzmq>=25.1.2",
        "regex",
        "requests",
        "scipy",
        "sentencepiece==0.2.1",
        "setproctitle",
        "tiktoken",
        "tokenizers==0.23.2",
        "tqdm",
        "transformers==5.19.0",
        "uvicorn>=0.51",
        "uvloop",
        "watchfiles",
        "xgrammar==0.2.7",
        "xxhash",
        "zstandard",
        "soundfile==0.13.1",
        "nvidia-ml-py",
    ),
)

ENVS = {"vllm-ascend": VLLM, "sglang": SGLANG}


def cache_dir(explicit: str | None = None) -> Path:
    return Path(explicit or os.environ.get("MOEPLAN_CONFORMANCE_CACHE") or DEFAULT_CACHE)


def python_of(spec: EnvSpec, cache: Path) -> Path:
    return cache / spec.name / "bin" / "python"


def ensure(spec: EnvSpec, cache: Path, log=print) -> Path:
    """The venv's python, installing the venv first if it is missing or its pins changed."""
    venv = cache / spec.name
    marker = venv / "moeplan-conformance.json"
    if marker.exists() and json.loads(marker.read_text()) == spec.marker():
        return python_of(spec, cache)
    cache.mkdir(parents=True, exist_ok=True)
    logfile = cache / f"{spec.name}.log"
    log(f"installing {spec.name} into {venv} (log: {logfile}; several minutes)")
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    steps = [
        [sys.executable, "-m", "venv", str(venv)],
        [*pip, "--upgrade", "pip"],
        [*pip, *spec.torch],
        [*pip, "--no-deps", *spec.no_deps],
        [*pip, *spec.deps],
    ]
    with open(logfile, "a", encoding="utf-8") as out:
        for step in steps:
            out.write("$ " + " ".join(step) + "\n")
            out.flush()
            if subprocess.run(step, stdout=out, stderr=subprocess.STDOUT, check=False).returncode:
                raise SystemExit(f"conformance: installing {spec.name} failed; see {logfile}")
    marker.write_text(json.dumps(spec.marker()))
    return python_of(spec, cache)


def installed_versions(python: Path, packages: tuple[str, ...]) -> dict[str, str]:
    """The versions actually installed in a venv (recorded with the result)."""
    code = "import importlib.metadata as m, json, sys; print(json.dumps({p: m.version(p) for p in sys.argv[1:]}))"
    out = subprocess.run([str(python), "-c", code, *packages], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)
