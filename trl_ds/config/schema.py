"""Typed schema of every config group, registered in Hydra's ConfigStore.

YAML presets under conf/ merge into `RunConfig`, so a misspelled key or a wrong type fails at compose time with
Hydra's own message. Keys that map onto DeepSpeed JSON or TRL arguments keep those libraries' names.
"""
import functools
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from trl_ds.config.run_name import register_run_name


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


class PreflightMode(str, Enum):
    auto = "auto"  # error on cuda clusters, warn on cpu
    error = "error"  # refuse to launch a config the memory estimate says cannot fit (exit code 2)
    warn = "warn"  # print the estimate's verdict and launch anyway
    off = "off"


class LauncherName(str, Enum):
    torchrun = "torchrun"  # one torchrun per node, static rendezvous at cluster.master_addr (node 0 = rank 0)
    deepspeed = "deepspeed"  # the deepspeed launcher over a hostfile (ssh/pdsh, or launcher.no_ssh per node)
    slurm = "slurm"  # sbatch.sh: srun starts launch.sh (torchrun) on every node of the allocation


class MultinodeRunner(str, Enum):
    """How the deepspeed launcher starts the nodes from node 0 (DeepSpeed's --launcher)."""
    pdsh = "pdsh"  # ssh to every host; DeepSpeed's launch starts each node's ranks (per-rank logs per node)
    openmpi = "openmpi"  # mpirun (Open MPI) starts every rank
    mpich = "mpich"  # mpirun (MPICH's hydra)
    impi = "impi"  # mpirun (Intel MPI)
    mvapich = "mvapich"  # mpirun_rsh (MVAPICH2)
    slurm = "slurm"  # srun, inside an allocation


class RdzvBackend(str, Enum):
    """How torchrun's nodes meet (launch/torchrun.py)."""
    static = "static"  # node N is torch's node N; node 0 serves the rendezvous and holds rank 0
    c10d = "c10d"  # nodes meet at the main node's store in any order; elastic with launcher.min_nodes


class TrainerName(str, Enum):
    sft = "sft"  # SFTTrainer: plain text, or prompt/completion
    dpo = "dpo"  # DPOTrainer: prompt/chosen/rejected preference pairs
    grpo = "grpo"  # GRPOTrainer: prompts, completions generated and scored by reward functions
    reward = "reward"  # RewardTrainer: chosen/rejected pairs, a sequence-classification head
    kto = "kto"  # KTOTrainer: unpaired prompt/completion/label examples (or pairs, which it unpairs)
    rloo = "rloo"  # RLOOTrainer: prompts, completions generated and scored by reward functions, leave-one-out baseline


class EvalStrategy(str, Enum):
    no = "no"
    steps = "steps"  # every trainer.eval_steps optimizer steps
    epoch = "epoch"


class PeftName(str, Enum):
    none = "none"
    lora = "lora"
    qlora = "qlora"  # LoRA over a base bitsandbytes loads in 4 bits (conf/peft/qlora.yaml)


class QuantType(str, Enum):
    """bitsandbytes' 4-bit data types (BitsAndBytesConfig.bnb_4bit_quant_type)."""
    nf4 = "nf4"  # NormalFloat4, QLoRA's
    fp4 = "fp4"


class SequenceParallelName(str, Enum):
    none = "none"
    ulysses = "ulysses"  # DeepSpeed's Ulysses (ALST) through accelerate's parallelism_config


class TensorParallelName(str, Enum):
    none = "none"
    autotp = "autotp"  # DeepSpeed's AutoTP training (ds_config.json tensor_parallel.autotp_size)


@dataclass
class ModelConfig:
    name: str = MISSING
    # Hub id or local folder; null builds the tiny model in code. Its config.json is the architecture, unless it is
    # `dimensions_of` (the model whose dimensions a preset spells out below).
    name_or_path: Optional[str] = None
    dimensions_of: Optional[str] = None
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
    # Further config.json keys of the family (experts, MLA ranks, head_dim, ...), as transformers names them.
    extra: Dict[str, Any] = field(default_factory=dict)
    # A Hugging Face config.json (file or folder) whose dimensions the memory planner uses instead of the above.
    config_path: Optional[str] = None


@dataclass
class ZeroConfig:
    """The `zero_optimization` block; field names are DeepSpeed's."""
    stage: int = 2  # 0..3
    auto: bool = False  # zero=auto: trl_ds.plan.autofit sets `stage` to the fastest that fits, before anything else
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
    zeropp: bool = False  # ZeRO++ (stage 3, GPUs): hpZ over cluster.gpus_per_node ranks, qwZ and qgZ
    # ZeRO++ part by part (stage 3, GPUs): hpZ's secondary partition size (1: off), int8 gathers, int4 reductions,
    # frozen weights kept quantized
    zero_hpz_partition_size: int = 1
    zero_quantized_weights: bool = False
    zero_quantized_gradients: bool = False
    zero_quantized_nontrainable_weights: bool = False
    # ZenFlow (offload.optimizer=cpu): DeepSpeed's ZenFlowConfig, e.g. zero.zenflow={topk_ratio:0.1}; {}: defaults
    zenflow: Any = None
    # Any other zero_optimization key by DeepSpeed's own name (+zero.allgather_partitions=false) goes into
    # ds_config.json, checked by DeepSpeed before launch (docs/deepspeed-keys.md).


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
    auto: bool = False  # offload=auto: trl_ds.plan.autofit sets optimizer and param to the fastest that fits
    pin_memory: bool = True
    nvme_path: Optional[str] = None  # folder for NVMe swap files; null: <run dir>/nvme
    # The optimizer's own NVMe folder (accelerate's offload_optimizer_nvme_path); null: nvme_path
    optimizer_nvme_path: Optional[str] = None
    keep_nvme_files: bool = False  # NVMe swap files are deleted when the run ends unless this is true
    buffer_count: int = 5  # parameter swap buffers (optimizer uses 4)
    buffer_size: int = 100_000_000  # elements per parameter swap buffer
    max_in_cpu: int = 1_000_000_000  # elements of parameters kept in CPU memory
    # Fraction of the optimizer's sub-groups offloaded (zero=stage3, offload.optimizer=cpu); the rest stay on device
    ratio: float = 1.0
    # Any other offload block key by DeepSpeed's own name (+offload.pipeline_read=true) goes into the blocks in use.
    aio: AioConfig = field(default_factory=AioConfig)


@dataclass
class HardwareConfig:
    """Speeds of the step-time model; null takes the `cluster.gpu` preset's (cluster.hardware.NAME=...)."""
    peak_tflops: Optional[float] = None  # TFLOP/s per device, dense, in the training dtype (bf16; fp32 on CPU)
    efficiency: Optional[float] = None  # fraction of peak_tflops a training step's matmuls reach (0..1)
    hbm_gbps: Optional[float] = None  # GB/s (1e9 B/s) of device memory; on CPU: what torch's AdamW reaches
    pcie_gbps: Optional[float] = None  # GB/s host<->device per device, one direction; on CPU: host memcpy
    intra_node_gbps: Optional[float] = None  # GB/s per device for collectives inside a node (NVLink, PCIe, gloo)
    inter_node_gbps: Optional[float] = None  # GB/s per device for collectives across nodes (IB/RoCE per GPU)
    collective_latency_us: Optional[float] = None  # microseconds of fixed cost per collective call
    comm_overlap: Optional[float] = None  # fraction of overlappable communication hidden behind compute (0..1)
    nvme_read_gbps: Optional[float] = None  # GB/s per node at offload.nvme_path
    nvme_write_gbps: Optional[float] = None  # GB/s per node at offload.nvme_path
    cpu_adam_mparams_per_s: Optional[float] = None  # million parameters/s per node, DeepSpeedCPUAdam (offload)
    micro_step_overhead_ms: Optional[float] = None  # milliseconds of framework time per micro-step (Python, hooks)
    # ns per trainable parameter per micro-step of ZeRO-2 / ZeRO-3's gradient path beyond its collectives
    zero2_ns_per_param: Optional[float] = None
    zero3_ns_per_param: Optional[float] = None
    zero3_us_per_module: Optional[float] = None  # microseconds per ZeRO-3 gathered module per micro-step


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
    # DeepSpeed hostfile (`HOST slots=N` lines) for launcher=deepspeed; null: generated from nodes × gpus_per_node
    hostfile: Optional[str] = None
    # Network environment for every rank, exported by launch.sh on each node, e.g. NCCL_SOCKET_IFNAME=ib0
    env: Dict[str, str] = field(default_factory=dict)
    # Step-time hardware: a preset of trl_ds/plan/hardware/ or a hardware YAML file (trl-ds calibrate writes one)
    gpu: str = "cpu"
    hardware: HardwareConfig = field(default_factory=HardwareConfig)


@dataclass
class TrainerConfig:
    """TRL/transformers argument names; dataset_name is TRL's ScriptArguments name."""
    name: TrainerName = TrainerName.sft
    # "tiny" (built in), a local .jsonl/.json/.parquet file, or a hub dataset name.
    dataset_name: str = "tiny"
    dataset_train_split: str = "train"
    max_steps: int = 10  # -1: trainer.num_train_epochs passes over the data decide
    num_train_epochs: float = 1.0  # used when trainer.max_steps=-1
    # Evaluation: eval_dataset_name (null: dataset_test_split of dataset_name; the tiny set has a test split)
    eval_strategy: EvalStrategy = EvalStrategy.no
    eval_steps: Optional[int] = None  # null: trainer.logging_steps
    per_device_eval_batch_size: int = 2
    eval_dataset_name: Optional[str] = None
    dataset_test_split: str = "test"
    per_device_train_batch_size: Any = 2  # a positive integer, or auto (trl_ds.plan.autofit picks it for the batch)
    gradient_accumulation_steps: Optional[int] = None  # null: derived from batch.global_size (or 1)
    learning_rate: float = 1e-3
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    max_grad_norm: float = 1.0
    lr_scheduler_type: str = "constant"
    warmup_steps: Any = 0  # steps, or a fraction of the run below 1 (transformers 5's warmup_steps takes both)
    logging_steps: int = 1
    max_length: int = 64  # tokens per sequence (sft, dpo, reward, kto)
    # Recompute activations in backward: less memory, about 1/3 more compute. auto: trl_ds.plan.autofit decides.
    gradient_checkpointing: Any = False
    dataloader_num_workers: int = 0
    # Drop each epoch's last, partial global batch (dataset rows not a multiple of the global batch; see the plan)
    dataloader_drop_last: bool = False
    # An integration transformers knows (none, tensorboard, wandb, ...) or a list; its package must be installed
    report_to: Any = "none"
    # Options of one trainer only (TRL's names); set for another trainer, an error before launch.
    # dpo, kto: how far the policy may move from the reference; grpo, rloo: KL coefficient, 0: no reference model
    beta: float = 0.1
    num_generations: int = 4  # grpo, rloo: completions per prompt; the global batch must be a multiple of it
    max_completion_length: int = 8  # grpo, rloo: tokens generated per completion
    temperature: float = 1.0  # grpo, rloo: sampling temperature of the generations
    reward_funcs: List[str] = field(default_factory=list)  # grpo, rloo: reward functions by dotted path (pkg.module.fn)
    # Any other argument of the trainer's TRL config class (+trainer.args.packing=true), checked before launch
    args: Dict[str, Any] = field(default_factory=dict)
    from_trl_config: Optional[str] = None  # a `trl <cmd> --config` YAML: its arguments mapped onto trl_ds's keys


@dataclass
class PeftConfig:
    """peft=lora: train low-rank adapters only (LoraConfig's names); peft=qlora: over a 4-bit base."""
    name: PeftName = PeftName.none
    r: int = 8  # adapter rank
    lora_alpha: int = 16  # scaling: the adapter's update is multiplied by lora_alpha / r
    lora_dropout: float = 0.05
    target_modules: List[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    # A frozen base quantized by bitsandbytes (BitsAndBytesConfig's names; peft=qlora sets load_in_4bit)
    load_in_4bit: bool = False
    load_in_8bit: bool = False
    bnb_4bit_quant_type: QuantType = QuantType.nf4
    bnb_4bit_use_double_quant: bool = False  # quantize the per-block scales too (8-bit, one fp32 per 256 blocks)
    bnb_4bit_compute_dtype: Optional[str] = None  # null: the training dtype (TRL's ModelConfig ties them)
    # The packed 4-bit weights' dtype (float32, bfloat16, float16, uint8); null: the training dtype (ZeRO-3 needs it)
    bnb_4bit_quant_storage: Optional[str] = None


@dataclass
class SequenceParallelConfig:
    """sp=ulysses: ranks that share one sequence, each holding size-th of its tokens (attention all-to-all)."""
    name: SequenceParallelName = SequenceParallelName.none
    size: int = 1  # ranks per sequence-parallel group; the data-parallel world is world / size
    auto: bool = False  # sp=auto: trl_ds.plan.autofit tries none and each size that divides the world in a node
    attn_implementation: str = "sdpa"  # sdpa, flash_attention_2 or flash_attention_3 (eager is not supported)


@dataclass
class TensorParallelConfig:
    """tp=autotp: ranks that split each layer's attention and MLP weights (trl_ds/check/tensor_parallel.py)."""
    name: TensorParallelName = TensorParallelName.none
    size: int = 1  # ranks per tensor-parallel group (DeepSpeed's autotp_size); data-parallel world / size
    auto: bool = False  # tp=auto: trl_ds.plan.autofit tries none and each size that divides the world in a node


@dataclass
class CheckpointConfig:
    every_steps: Any = 0  # 0: none; N: every N optimizer steps; below 1: that fraction of the run (save_steps 0.5)
    every_epoch: bool = False  # a checkpoint at the end of every epoch (transformers' save_strategy=epoch)
    keep_last: int = 2  # complete checkpoints kept; older ones are deleted after a newer one is marked complete


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
    # bf16, ZeRO 1-3 (DeepSpeed's bf16 block): master weights and gradients in bf16 (offload.optimizer=cpu unless
    # bf16_optimizer_states), and Adam's moments in bf16 (needs bf16_master_weights_and_grads)
    bf16_master_weights_and_grads: bool = False
    bf16_optimizer_states: bool = False
    # true: auto-fit and the plan grid try the two options above (fp32, bf16 master, both bf16) where bf16 is in force
    bf16_optimizer_auto: bool = False


@dataclass
class SlurmConfig:
    """launcher=slurm: #SBATCH options (SLURM's own words) and whether to submit."""
    job_name: str = "trl_ds"
    partition: Optional[str] = None  # null: the cluster's default partition
    account: Optional[str] = None
    time: Optional[str] = None  # wall-clock limit: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS; null: default
    cpus_per_task: Optional[int] = None  # CPUs for each node's task (its launcher and all its ranks)
    extra_sbatch: List[str] = field(default_factory=list)  # more options, one per #SBATCH line: ["--qos=high"]
    submit: bool = True  # false: write sbatch.sh only (submit later with: sbatch <run dir>/sbatch.sh)
    # --requeue: a preempted or requeued job runs again and resumes from the run dir's newest complete checkpoint
    requeue: bool = True
    # pyxis/enroot image for every node's task (a .sqsh path, or 'nvcr.io#nvidia/pytorch:24.05-py3' quoted), holding
    # trl_ds; the run dir is mounted at its own path, plus container_mounts ("/host:/container[:ro]"). null: none
    container_image: Optional[str] = None
    container_mounts: List[str] = field(default_factory=list)


@dataclass
class LauncherConfig:
    name: LauncherName = LauncherName.torchrun
    # Extra environment for every rank; written into launch.sh (cluster.env holds the network variables).
    env: Dict[str, str] = field(default_factory=dict)
    # Seconds for every node to reach the rendezvous; past it the launch ends naming the node that is missing.
    rdzv_timeout: int = 900
    max_restarts: int = 0  # torchrun restarts of a failed node's ranks before the launch fails
    # torchrun (and launcher=slurm, which runs it): static, or c10d (any start order; see launch/torchrun.py).
    rdzv_backend: RdzvBackend = RdzvBackend.static
    # c10d only: start once this many nodes are there (--nnodes MIN:MAX); fewer ranks accumulate more. null: all
    min_nodes: Optional[int] = None
    last_call_s: int = 30  # c10d: once min_nodes are there, how long to wait for more before starting
    # Live progress on the launching terminal: one line redrawn in place on a TTY, else a line every this many seconds.
    progress_every_s: float = 30.0
    # launcher=deepspeed: start each node yourself (bash launch.sh NODE_RANK) instead of over ssh/pdsh.
    no_ssh: bool = False
    # launcher=deepspeed across nodes over ssh: pdsh, or an MPI launcher / srun that starts every rank itself
    multinode_runner: MultinodeRunner = MultinodeRunner.pdsh
    # Extra arguments for that runner (DeepSpeed's --launcher_args), e.g. "--allow-run-as-root" for Open MPI
    launcher_args: str = ""
    include: str = ""  # launcher=deepspeed --include, e.g. "node-0@node-1:0,1" (hosts, optionally their slots)
    exclude: str = ""  # launcher=deepspeed --exclude, same syntax
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    from_accelerate: Optional[str] = None  # an `accelerate launch --config_file` YAML (check/accelerate_yaml.py)


@dataclass
class PreflightConfig:
    """Checks before launch; the memory estimate is also written to plan.json in the run dir."""
    memory: PreflightMode = PreflightMode.auto
    # Host and network checks on every node before launch (trl-ds doctor runs them alone); false: skip.
    hosts: bool = True


@dataclass
class RunConfig:
    model: ModelConfig = MISSING
    zero: ZeroConfig = MISSING
    offload: OffloadConfig = MISSING
    cluster: ClusterConfig = MISSING
    trainer: TrainerConfig = MISSING
    precision: PrecisionConfig = MISSING
    launcher: LauncherConfig = MISSING
    peft: PeftConfig = MISSING
    sp: SequenceParallelConfig = MISSING
    tp: TensorParallelConfig = field(default_factory=TensorParallelConfig)  # run dirs written before tp load too
    batch: BatchConfig = field(default_factory=BatchConfig)
    # Any other top-level block of ds_config.json by DeepSpeed's own name (+deepspeed.wall_clock_breakdown=true),
    # checked by DeepSpeed before launch; keys trl_ds derives are refused, naming trl_ds's key.
    deepspeed: Dict[str, Any] = field(default_factory=dict)
    preflight: PreflightConfig = field(default_factory=PreflightConfig)
    seed: int = 42
    dry_run: bool = False  # write the run dir and print the commands; spawn nothing
    save_final_model: bool = True  # <run dir>/final_model, loadable with from_pretrained (gathered under ZeRO-3)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    # auto: continue from the run dir's newest complete checkpoint if there is one; never: start over
    resume: str = "auto"
    # A user's training script run on every rank instead of trl_ds's worker (docs/scripts.md)
    script: Optional[str] = None
    script_args: List[str] = field(default_factory=list)
    # What the script's parser takes: auto (found from its code), trl, hf, hf_file or none (docs/scripts.md)
    script_convention: str = "auto"


def register() -> None:
    """The top-level schema types every group's preset when it merges in (conf/config.yaml lists it first)."""
    store_schema()
    register_run_name()


@functools.lru_cache(maxsize=None)
def store_schema() -> None:
    """Once per process: storing builds the structured config (25 ms), and the store keeps it across compositions."""
    ConfigStore.instance().store(name="base_run", node=RunConfig)
