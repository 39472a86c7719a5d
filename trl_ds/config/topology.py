"""The parallel dimensions of a run, in one object: nodes × ranks per node = world = dp × tp × sp. Sequence- and
tensor-parallel ranks share a sample; only the data-parallel ranks, world / (tp × sp), read different samples, so
they alone multiply the global batch, and ZeRO shards states over them.
"""
from dataclasses import dataclass
from typing import Optional

from trl_ds.config.model_source import model_source


@dataclass(frozen=True)
class Topology:
    nodes: int
    gpus_per_node: int  # ranks per node (CPU processes when cluster.device=cpu)
    sp_size: int = 1  # ranks sharing one sequence (Ulysses); 1 without sequence parallelism
    tp_size: int = 1  # ranks sharing each layer's weights (AutoTP); 1 without tensor parallelism

    @property
    def world(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def data_parallel(self) -> int:
        """Ranks that read different samples; at least 1."""
        return max(self.world // self.shares_samples, 1)

    @property
    def shares_samples(self) -> int:
        """Ranks that read the same sample: one data-parallel rank's whole group."""
        return max(self.sp_size, 1) * max(self.tp_size, 1)  # a size below 1 is refused before launch

    def describe(self) -> str:
        """`dp 2 × tp 2 × sp 1`, for the launch line and the run dir's files."""
        return f"dp {self.data_parallel} × tp {self.tp_size} × sp {self.sp_size}"


def topology(cfg) -> Topology:
    """The run's topology from its cluster, sp and tp groups; the cluster owns the world size."""
    sp = cfg.sp.size if _value(cfg.sp.name) != "none" else 1
    tp_group = getattr(cfg, "tp", None)  # absent from configs composed before tp existed
    tp = tp_group.size if tp_group is not None and _value(tp_group.name) != "none" else 1
    return Topology(nodes=cfg.cluster.nodes, gpus_per_node=cfg.cluster.gpus_per_node, sp_size=sp, tp_size=tp)


def _value(x):
    return getattr(x, "value", x)


# tp=autotp: DeepSpeed's AutoTP preset for each supported family, applied instead of the model's tp_plan (which
# splits lm_head by vocabulary, under TRL's fused head that reads lm_head.weight). Others are refused
# (check/tensor_parallel.py); phi3 too: its attention slices the fused qkv at the whole model's width.
AUTOTP_PRESETS = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "llama", "gemma": "llama",
                  "gemma2": "llama", "gemma3_text": "llama"}


def model_type(model_cfg) -> str:
    """The family of the model the config names: its config.json's model_type, else the preset's."""
    src = model_source(model_cfg)
    return (src.config or {}).get("model_type") or model_cfg.model_type


def autotp_preset(model_cfg) -> Optional[str]:
    """The AutoTP preset that splits this model, or None for a family trl_ds does not split."""
    return AUTOTP_PRESETS.get(model_type(model_cfg))
