"""Typed schema of every config group, registered in Hydra's ConfigStore.

YAML presets under conf/ merge into `RunConfig`, so a misspelled key or a wrong type fails at compose time with
Hydra's own message. Keys that map onto DeepSpeed JSON or TRL arguments keep those libraries' names.
"""
from dataclasses import dataclass, field
from enum import Enum
from typing import Dict, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


class Device(str, Enum):
    cpu = "cpu"
    cuda = "cuda"


class OffloadDevice(str, Enum):
    none = "none"
    cpu = "cpu"
    nvme = "nvme"


class Dtype(str, Enum):
    auto = "auto"  # bf16 on cuda, fp32 on cpu
    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"


class LauncherName(str, Enum):
    torchrun = "torchrun"


class TrainerName(str, Enum):
    sft = "sft"


@dataclass
class ModelConfig:
    name: str = MISSING
    # Hub id or local folder (save_pretrained); null builds the tiny model in code.
    name_or_path: Optional[str] = None
    # Architecture, so parameter counts are exact without a download (transformers' config names).
    model_type: str = "llama"
    vocab_size: int = MISSING
    hidden_size: int = MISSING
    intermediate_size: int = MISSING
    num_hidden_layers: int = MISSING
    num_attention_heads: int = MISSING
    num_key_value_heads: int = MISSING
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # q/k/v projections carry a bias (Qwen2)


@dataclass
class ZeroConfig:
    """The `zero_optimization` block; field names are DeepSpeed's."""
    stage: int = 2  # 0..3
    overlap_comm: bool = True
    contiguous_gradients: bool = True
    reduce_scatter: bool = True
    reduce_bucket_size: int = 500_000_000  # elements
    allgather_bucket_size: int = 500_000_000  # elements, stages 1-2
    round_robin_gradients: bool = False
    stage3_prefetch_bucket_size: int = 50_000_000  # elements
    stage3_param_persistence_threshold: int = 100_000  # elements: smaller params stay whole on every rank
    stage3_max_live_parameters: int = 1_000_000_000  # elements
    stage3_max_reuse_distance: int = 1_000_000_000  # elements
    stage3_gather_16bit_weights_on_model_save: bool = True
    sub_group_size: int = 1_000_000_000  # elements per optimizer sub-group (stage 3)


@dataclass
class AioConfig:
    """DeepSpeed's `aio` block for NVMe offload (libaio)."""
    block_size: int = 1_048_576  # bytes
    queue_depth: int = 8
    intra_op_parallelism: int = 1
    single_submit: bool = False
    overlap_events: bool = True


@dataclass
class OffloadConfig:
    optimizer: OffloadDevice = OffloadDevice.none
    param: OffloadDevice = OffloadDevice.none  # needs zero stage 3
    pin_memory: bool = True
    # Folder for NVMe swap files; null means <run dir>/nvme.
    nvme_path: Optional[str] = None
    buffer_count: int = 5  # parameter swap buffers (optimizer uses 4)
    buffer_size: int = 100_000_000  # elements per parameter swap buffer
    max_in_cpu: int = 1_000_000_000  # elements of parameters kept in CPU memory
    aio: AioConfig = field(default_factory=AioConfig)


@dataclass
class ClusterConfig:
    name: str = MISSING
    nodes: int = 1
    gpus_per_node: int = 2  # ranks per node (CPU processes when device=cpu)
    device: Device = Device.cpu
    gpu_memory_gb: float = 80.0  # GiB per device
    cpu_memory_gb: float = 24.0  # GiB of host RAM per node
    node_rank: int = 0  # which node this launch starts
    master_addr: str = "127.0.0.1"
    master_port: int = 29500


@dataclass
class TrainerConfig:
    """TRL/transformers argument names; dataset_name is TRL's ScriptArguments name."""
    name: TrainerName = TrainerName.sft
    # "tiny" (built in), a local .jsonl/.json/.parquet file, or a hub dataset name.
    dataset_name: str = "tiny"
    dataset_train_split: str = "train"
    max_steps: int = 10
    per_device_train_batch_size: int = 2
    gradient_accumulation_steps: Optional[int] = None  # null: derived from batch.global_size (or 1)
    learning_rate: float = 1e-3
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    max_grad_norm: float = 1.0
    lr_scheduler_type: str = "constant"
    warmup_steps: int = 0
    logging_steps: int = 1
    max_length: int = 64  # tokens per sequence
    gradient_checkpointing: bool = False
    dataloader_num_workers: int = 0
    report_to: str = "none"


@dataclass
class BatchConfig:
    # Samples per optimizer step across all ranks; null means micro × world × accumulation.
    global_size: Optional[int] = None


@dataclass
class PrecisionConfig:
    dtype: Dtype = Dtype.auto
    # fp16 dynamic loss scaling (DeepSpeed's names)
    initial_scale_power: int = 16
    loss_scale_window: int = 1000
    hysteresis: int = 2
    min_loss_scale: int = 1


@dataclass
class LauncherConfig:
    name: LauncherName = LauncherName.torchrun
    # Extra environment for every rank (e.g. NCCL_SOCKET_IFNAME); written into launch.sh.
    env: Dict[str, str] = field(default_factory=dict)


@dataclass
class RunConfig:
    model: ModelConfig = MISSING
    zero: ZeroConfig = MISSING
    offload: OffloadConfig = MISSING
    cluster: ClusterConfig = MISSING
    trainer: TrainerConfig = MISSING
    precision: PrecisionConfig = MISSING
    launcher: LauncherConfig = MISSING
    batch: BatchConfig = field(default_factory=BatchConfig)
    seed: int = 42
    dry_run: bool = False  # write the run dir and print the commands; spawn nothing
    save_final_model: bool = True  # <run dir>/final_model, loadable with from_pretrained (gathered under ZeRO-3)


def register() -> None:
    """The top-level schema types every group's preset when it merges in (conf/config.yaml lists it first)."""
    ConfigStore.instance().store(name="base_run", node=RunConfig)
