"""tp=autotp before launch: the ds_config block DeepSpeed's own parser reads, every refusal with its fix, and the
planner's per-rank parameters held to an independent count (a meta-device transformers model split by DeepSpeed's
own AutoTP preset specs and shard-size rule)."""
import pytest

from trl_ds.check.history import check_history
from trl_ds.check.validate import validate
from trl_ds.config.topology import Topology, topology
from trl_ds.errors import ConfigError
from trl_ds.plan.params import architecture, config_dict, count_params
from trl_ds.plan.saved_activations import LLAMA, decoder_bytes
from trl_ds.plan.tensor_parallel import allreduce_bytes, local_architecture
from trl_ds.rundir.deepspeed_config import build_ds_config

RUN = "/tmp/trl_ds_unit_tp_run"  # never written: validate with launching=False reads only what exists
TP2 = ["tp=autotp", "tp.size=2", "trainer.per_device_train_batch_size=4"]


def test_tp_is_a_third_dimension_of_the_topology(compose_cfg):
    assert Topology(2, 8, sp_size=1, tp_size=4).data_parallel == 4
    assert Topology(1, 8, sp_size=2, tp_size=2).data_parallel == 2
    cfg = compose_cfg(["cluster=2x8", "tp=autotp", "tp.size=4"])
    assert topology(cfg) == Topology(nodes=2, gpus_per_node=8, sp_size=1, tp_size=4)
    assert topology(cfg).describe() == "dp 4 × tp 4 × sp 1"
    assert topology(compose_cfg(["tp.size=4"])).tp_size == 1  # tp=none: the size is ignored (and refused below)


def test_autotp_composes_to_deepspeeds_tensor_parallel_block(compose_cfg, monkeypatch):
    import deepspeed.runtime.config as ds_runtime_config
    from deepspeed.module_inject.autotp_config import PartitionType

    cfg = compose_cfg(TP2)
    batch = validate(cfg, RUN, launching=False)
    # the global batch counts data-parallel ranks only: 2 ranks at tp.size=2 read one sample stream
    assert (batch.global_size, batch.micro, batch.world, batch.accumulation) == (4, 4, 1, 1)
    ds = build_ds_config(cfg, batch, RUN)
    assert ds["tensor_parallel"] == {"autotp_size": 2, "preset_model": "llama"}
    assert "train_batch_size" not in ds  # transformers would check it against the whole world
    assert ds["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True  # a whole final model
    monkeypatch.setattr(ds_runtime_config, "dist", type("Dist", (), {"get_rank": lambda self: 0,
                                                                      "get_world_size": lambda self: 2})())
    parsed = ds_runtime_config.DeepSpeedConfig(ds).tensor_parallel_config
    assert parsed.autotp_size == 2
    specs = parsed.get_partition_config_object()
    kinds = {name: getattr(specs.find_matching_spec(name, "llama"), "partition_type", None) for name in (
        "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.o_proj.weight",
        "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight", "lm_head.weight",
        "model.embed_tokens.weight")}
    assert kinds == {"model.layers.0.self_attn.q_proj.weight": PartitionType.COLUMN,
                     "model.layers.0.self_attn.o_proj.weight": PartitionType.ROW,
                     "model.layers.0.mlp.up_proj.weight": PartitionType.COLUMN,
                     "model.layers.0.mlp.down_proj.weight": PartitionType.ROW,
                     "lm_head.weight": None, "model.embed_tokens.weight": None}  # None: left whole
    assert "tensor_parallel" not in build_ds_config(compose_cfg([]), validate(compose_cfg([]), RUN, False), RUN)


def problems_of(compose_cfg, overrides):
    with pytest.raises(ConfigError) as err:
        validate(compose_cfg(overrides), RUN, launching=False)
    return err.value.problems


def test_every_refusal_at_once_with_its_fix(compose_cfg):
    problems = problems_of(compose_cfg, ["tp=autotp", "tp.size=4", "cluster.gpus_per_node=6", "zero=stage3",
                                         "peft=lora", "sp=ulysses", "sp.size=2"])
    assert "tp.size=4 must divide the world size 6 (cluster=local). Use tp.size=2 or 3 or 6." in problems
    assert ("tp.size=4 must divide model.num_attention_heads=4 and num_key_value_heads=2: AutoTP splits attention "
            "by key-value head groups, so the ranks would hold unequal shards (none beyond 2). Use tp.size=2."
            ) in problems
    assert ("tp=autotp does not load under zero=stage3: transformers raises NotImplementedError for a ZeRO-3 load "
            "with tensor_parallel.autotp_size=4 (integrations/deepspeed.py, _apply_weight_conversions_to_state_dict). "
            "Use zero=stage2 (it shards gradients and optimizer states over the data-parallel ranks), or tp=none."
            ) in problems
    assert ("tp=autotp with peft=lora: PEFT wraps each target Linear (q_proj.base_layer), which AutoTP's layer "
            "patterns no longer match, so the layers would stay whole. Use peft=none or tp=none.") in problems
    assert any(p.startswith("tp=autotp with sp=ulysses: trl_ds has not trained the two together") for p in problems)


@pytest.mark.parametrize("overrides, expected", [
    (["tp.size=2"], "tp.size=2 has no effect with tp=none. Use tp=autotp tp.size=2."),
    (["tp=autotp", "tp.size=0"], "tp.size=0 must be at least 1 (1: no layer is split). Set tp.size=2, or tp=none."),
    # one key-value head: no size of 2 or more divides it (the fix used to read "Use tp.size=none: use tp=none.")
    (["tp=autotp", "model.num_key_value_heads=1"], "tp.size=2 must divide model.num_attention_heads=4 and "
     "num_key_value_heads=1: AutoTP splits attention by key-value head groups, so the ranks would hold unequal shards "
     "(none beyond 1). No tp.size of 2 or more divides both: use tp=none."),
    (["tp=autotp", "model=mixtral-8x7b", "cluster=1x8"],
     "tp=autotp cannot split model=mixtral-8x7b (model_type mixtral): transformers keeps each MoE block's experts "
     "as one fused 3D parameter, which AutoTP's nn.Linear specs do not match, so the experts would stay whole on "
     "every rank. Families split: gemma, gemma2, gemma3_text, llama, mistral, qwen2, qwen3. Use tp=none "
     "(zero=stage3 shards every weight)."),
    (["tp=autotp", "trainer=dpo"], "tp=autotp is trained with trainer=sft only here; trainer=dpo under AutoTP is "
     "untested (a reference model, generation or a score head beside the split layers). Use trainer=sft, or "
     "tp=none."),
    (["tp=autotp", "model=phi3-mini"], "tp=autotp cannot split model=phi3-mini (model_type phi3): transformers' "
     "Phi3Attention slices its fused qkv_proj output at the whole model's heads × head_dim, which a rank's shard does "
     "not hold. Families split: gemma, gemma2, gemma3_text, llama, mistral, qwen2, qwen3. Use tp=none (zero=stage3 "
     "shards every weight)."),
])
def test_one_refusal(compose_cfg, overrides, expected):
    assert expected in problems_of(compose_cfg, overrides)


def test_tp_size_1_under_autotp_trains_as_the_run_without_tp(compose_cfg):
    """A sweep over tp.size (-m tp=autotp tp.size=1,2) cannot switch to tp=none at its first point: tp.size=1 splits
    nothing, so its run dir's DeepSpeed JSON and trainer arguments are those of tp=none (no tensor_parallel block)."""
    from trl_ds.rundir.trainer_config import build_trainer_args

    one, plain = compose_cfg(["tp=autotp", "tp.size=1"]), compose_cfg([])
    built = [(build_ds_config(c, b, RUN), build_trainer_args(c, b, RUN))
             for c in (one, plain) for b in [validate(c, RUN, launching=False)]]
    assert built[0] == built[1] and "tensor_parallel" not in built[0][0]
    assert topology(one).tp_size == 1 and validate(one, RUN, launching=False).global_size == 4


def test_zero3_refusal_is_transformers_own_and_fails_when_it_goes():
    """The ZeRO-3 refusal rests on this raise; if a transformers release loads AutoTP under ZeRO-3, this fails and
    the refusal (trl_ds/check/tensor_parallel.py) should be lifted after a real ZeRO-3 + tp run."""
    from transformers.integrations.deepspeed import HfDeepSpeedConfig, _apply_weight_conversions_to_state_dict

    # transformers' deepspeed_config() reads this object through a weak reference: it must stay alive
    ds_config = HfDeepSpeedConfig({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3},
                                   "tensor_parallel": {"autotp_size": 2}})
    with pytest.raises(NotImplementedError, match="with DeepSpeed Tensor Parallelism are not yet implemented"):
        next(iter(_apply_weight_conversions_to_state_dict(None, {}, None)))
    assert ds_config.is_zero3()


# ---- the planner's arithmetic, against DeepSpeed's own rules on a meta-device model ------------------------------

def deepspeed_rank0_parameters(arch, tp: int, preset: str) -> int:
    """Rank 0's parameters as AutoTP splits them: transformers builds the model on the meta device, DeepSpeed's
    preset picks each weight's partition type, DeepSpeed's get_shard_size gives rank 0's width."""
    import torch
    from deepspeed.module_inject.autotp_config import AutoTPPresets, PartitionType
    from deepspeed.module_inject.tp_shard import AutoTPMeta, get_shard_size
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = config_dict(arch)
    hf_config = AutoConfig.for_model(**raw)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config)
    specs, meta = AutoTPPresets.get_preset(preset), AutoTPMeta.from_model_config(hf_config)
    total = 0
    for module_name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear):
            total += sum(p.numel() for p in module.parameters(recurse=False))
            continue
        spec = specs.find_matching_spec(f"{module_name}.weight", raw["model_type"])
        kind = spec.partition_type if spec else PartitionType.SKIP
        out_f, in_f = module.weight.shape
        parts = spec.shape[0] if spec is not None and spec.shape else 1  # phi3's fused qkv (3) and gate_up (2)

        def shard(width, parts=parts, name=module_name):
            return parts * get_shard_size(width // parts, tp, meta, name, rank=0)

        bias = module.bias.numel() if module.bias is not None else 0
        if kind == PartitionType.COLUMN:
            total += shard(out_f) * in_f + (shard(out_f) if bias else 0)
        elif kind == PartitionType.ROW:
            total += out_f * shard(in_f) + bias
        else:
            total += sum(p.numel() for p in module.parameters(recurse=False))
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    return total - (model.get_input_embeddings().weight.numel() if tied else 0)  # a tied head counted once


@pytest.mark.parametrize("model, tp, preset", [
    ("tiny", 2, "llama"), ("llama3-8b", 2, "llama"), ("llama3-8b", 8, "llama"), ("qwen2.5-7b", 4, "qwen2"),
    ("qwen2.5-0.5b", 2, "qwen2"), ("mistral-7b", 4, "llama"), ("gemma2-9b", 8, "llama")])
def test_per_rank_parameters_match_deepspeeds_split(compose_cfg, model, tp, preset):
    """The planner counts rank 0's share as the whole model with rank 0's layer (memory.py setup_from_config)."""
    arch = architecture(compose_cfg([f"model={model}"]).model)
    assert count_params(local_architecture(arch, tp)).total == deepspeed_rank0_parameters(arch, tp, preset)


def test_llama3_8b_weights_per_rank_at_tp_1_2_8(compose_cfg):
    """Whole: 32 layers of 4096² q/o, 2 × 4096·1024 k/v, 3 × 4096·14336 MLP = 6,979,321,856 split; 2 × 128256·4096
    embeddings + lm_head and 65 norms of 4096 = 1,050,939,392 whole (the published 8.03 B in total)."""
    arch = architecture(compose_cfg(["model=llama3-8b"]).model)
    split_linears = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
    whole = 2 * 128256 * 4096 + 65 * 4096
    assert [count_params(local_architecture(arch, tp)).total for tp in (1, 2, 8)] == [
        whole + split_linears, whole + split_linears // 2, whole + split_linears // 8]



def test_the_plan_names_the_whole_model_and_one_ranks_share():
    """The header and plan.json give the model's own size first (the published 8.03 B), then tp's per-rank share."""
    import json
    import subprocess
    import sys

    whole = 2 * 128256 * 4096 + 65 * 4096 + 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
    cmd = [sys.executable, "-m", "trl_ds.plan", "model=llama3-8b", "cluster=1x8", "tp=autotp", "tp.size=2"]
    text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert text.splitlines()[0].startswith("trl_ds plan: llama3-8b (8.03B parameters, 4.54B per rank at tp.size=2,")
    plan = json.loads(subprocess.run(cmd + ["--json"], capture_output=True, text=True, check=True).stdout)
    split = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
    assert (plan["parameters"], plan["tp_size"], plan["parameters_per_rank"]) == (whole, 2, whole - split // 2)

def test_saved_activations_split_the_heads_and_mlp_but_not_the_hidden_terms(compose_cfg):
    """Llama's fp32 coefficients (bytes per token): 24 h + 16 f + 8 q + 8 kv + 4 heads + 8; at tp 2 the last four
    features halve and h and the constant stay."""
    arch = architecture(compose_cfg(["model=llama3-8b"]).model)
    c = LLAMA[4]["token"]
    h, f, q, kv, heads = 4096, 14336, 4096, 1024, 32
    whole = c["h"] * h + c["one"]
    split = c["f"] * f + c["q"] * q + c["kv"] * kv + c["heads"] * heads
    tokens, seq = 1024, 1024
    _, all_layers = decoder_bytes(local_architecture(arch, 2), 4, tokens, seq)
    assert all_layers == 32 * tokens * (whole + split // 2)


def test_allreduce_bytes_per_micro_step():
    """Tiny Llama, 128 tokens, fp32, tp 2: per layer 2 forward (o_proj, down_proj) + 5 backward (q, k, v, gate,
    up) all-reduces of 128 × 128 × 4 B, each sending half its buffer from each rank (ring: 2 (tp - 1) / tp)."""
    from trl_ds.plan.params import Architecture

    tiny = Architecture(model_type="llama", vocab_size=512, hidden_size=128, intermediate_size=352,
                        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=32)
    assert allreduce_bytes(tiny, 2, 128, 4) == 7 * 4 * 128 * 128 * 4
    assert allreduce_bytes(tiny, 2, 128, 4, checkpointing=True) == 9 * 4 * 128 * 128 * 4
    assert allreduce_bytes(tiny, 1, 128, 4) == 0


def test_a_tp_checkpoint_of_another_world_is_refused(compose_cfg, tmp_path):
    from trl_ds.rundir.checkpoint import mark_complete

    checkpoint = tmp_path / "trainer" / "checkpoint-4"
    checkpoint.mkdir(parents=True)
    mark_complete(str(checkpoint), step=4, world_size=2, zero_stage=2)  # what a tp.size=2 run on 2 ranks writes
    assert validate(compose_cfg(TP2), str(tmp_path), launching=False).world == 1  # its own shape resumes
    with pytest.raises(ConfigError) as err:
        validate(compose_cfg([*TP2, "cluster.gpus_per_node=4"]), str(tmp_path), launching=False)
    assert err.value.problems == [
        f"tp=autotp: {checkpoint} was written by world size 2 with ZeRO stage 2; this launch has world size 4 with "
        f"ZeRO stage 2; trl_ds has not converted a tensor-parallel checkpoint to another shape. Relaunch it with "
        f"world size 2 and zero=stage2 (the cluster and zero it was written with), or use a new hydra.run.dir to "
        f"start over."]
    # resume=never, which this refusal used to offer, is itself refused in a run dir that holds a history
    (tmp_path / "metrics.jsonl").write_text("")
    never = check_history(compose_cfg([*TP2, "cluster.gpus_per_node=4", "resume=never"]), str(tmp_path))
    assert never and never[0].startswith("resume=never, but hydra.run.dir=")


def test_allreduce_seconds_are_bytes_over_bandwidth_plus_latency():
    """Tiny Llama, 128 tokens, fp32, tp 2, 1 GB/s and 10 µs per call (test_allreduce_bytes_per_micro_step): 7
    calls × 4 layers × 65,536 B × (2 × 1/2) = 1,835,008 B -> 1.835008 ms, plus 28 calls × 10 µs = 0.28 ms."""
    from trl_ds.plan.params import Architecture
    from trl_ds.plan.tensor_parallel import allreduce_seconds

    tiny = Architecture(model_type="llama", vocab_size=512, hidden_size=128, intermediate_size=352,
                        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=32)
    assert allreduce_seconds(tiny, 2, 128, 4, False, 1.0, 10.0) == pytest.approx(1.835008e-3 + 0.28e-3)
    assert allreduce_seconds(tiny, 1, 128, 4, False, 1.0, 10.0) == 0.0


def test_installed_deepspeed_is_new_enough_and_versions_parse():
    from trl_ds.check.tensor_parallel import MIN_DEEPSPEED, _release, _versions

    assert _versions() == []  # the installed deepspeed has autotp_size and preset_model
    assert _release("0.19.8+cu121") == (0, 19, 8) and _release("0.16.4rc1") == (0, 16, 4)
    assert _release("0.16.3") < MIN_DEEPSPEED <= _release("0.16.4")


def test_the_estimate_and_step_time_divide_what_tp_splits(compose_cfg):
    """llama3-8b on 1x8, bf16, ZeRO-2: at tp.size=2 each rank holds rank 0's 4,540,600,320 parameters (held to
    DeepSpeed's split above), ZeRO shards Adam over the 4 data-parallel ranks, the saved activations are those of the
    split layers, and communication gains TP's all-reduces: 7 per layer (no checkpointing) of tokens × 4096 × 2 B."""
    from trl_ds.plan.memory import estimate, setup_from_config
    from trl_ds.plan.steptime import communication_seconds, hardware_from_config, step_time

    base = ["model=llama3-8b", "cluster=1x8", "trainer.per_device_train_batch_size=2"]
    one, two = (setup_from_config(compose_cfg(base + extra)) for extra in ([], ["tp=autotp", "tp.size=2"]))
    arch = architecture(compose_cfg(base).model)
    assert (one.total_params, two.total_params) == (8_030_261_248, 4_540_600_320)
    assert (one.world, two.world, two.data_parallel) == (8, 4, 4)
    device = estimate(two).device
    assert device["params"] == 2 * 4_540_600_320  # bf16: ZeRO-2 keeps a rank's whole 16-bit weights
    assert device["optimizer"] == int(12 * 4_540_600_320 / 4)  # fp32 master + Adam, over the data-parallel ranks
    assert device["activations"] == decoder_bytes(local_architecture(arch, 2), 2, two.tokens, two.seq_len)[1]
    assert estimate(one).device["params"] == 2 * 8_030_261_248
    hw = hardware_from_config(compose_cfg(base))
    tokens = two.tokens
    by_hand = 7 * 32 * tokens * 4096 * 2 * (2 * 1 / 2) / (hw.intra_node_gbps * 1e9) + 7 * 32 * (
        hw.collective_latency_us or 0) * 1e-6
    zero = communication_seconds(two, hw, 1, step_time(two, hw).terms["compute"])
    assert step_time(two, hw).terms["communication"] == pytest.approx(zero + by_hand)


def test_the_grid_and_auto_fit_leave_zero3_out_under_tp(compose_cfg):
    from trl_ds.plan.grid import setups
    from trl_ds.plan.memory import setup_from_config

    base = ["model=llama3-8b", "cluster=1x8"]
    stages = {s.stage for s in setups(setup_from_config(compose_cfg([*base, "tp=autotp", "tp.size=2"])), [1])}
    assert stages == {0, 1, 2}  # ZeRO-3 is refused with tp=autotp
    assert {s.stage for s in setups(setup_from_config(compose_cfg(base)), [1])} == {0, 1, 2, 3}


def test_host_memory_counts_the_whole_model_every_rank_loads(compose_cfg):
    """Below ZeRO-3 every rank loads the whole model (4 B per parameter, DeepSpeed's assumption) before AutoTP splits
    it: the host column is the same at tp 1 and tp 2."""
    from trl_ds.plan.memory import estimate, setup_from_config

    base = ["model=llama3-8b", "cluster=1x8", "zero=stage2"]
    one, two = (estimate(setup_from_config(compose_cfg(base + extra))).host["model_states"]
                for extra in ([], ["tp=autotp", "tp.size=2"]))
    assert one == two == int(4 * 8_030_261_248 * 8 * 1.5)
