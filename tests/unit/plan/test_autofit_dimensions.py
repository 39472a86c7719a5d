"""tp=auto, sp=auto, precision.bf16_optimizer_auto=true (trl_ds/plan/dimensions.py): auto-fit and the plan grid vary
the AutoTP size, the Ulysses size and the 16-bit optimizer options, only as the launch's check accepts them, and say
why against the runner-up. Expected bytes are worked by hand from docs/planner.md's formulas and the presets'
dimensions (conf/model/*.yaml), not read from the estimate."""
import io
from contextlib import redirect_stdout

import pytest

from trl_ds.check.deepspeed_features import check_bf16_options
from trl_ds.check.plan_rows import RowCheck
from trl_ds.cli.app import build
from trl_ds.cli.plan import main as plan_main
from trl_ds.config.values import value
from trl_ds.errors import ConfigError
from trl_ds.plan.autofit import candidates, resolve
from trl_ds.plan.params import architecture
from trl_ds.plan.sequence_parallel import all_to_all_bytes

L8B = ["model=llama3-8b", "cluster=1x8", "trainer.max_length=2048", "trainer.gradient_checkpointing=true",
       "trainer.per_device_train_batch_size=1", "batch.global_size=64"]
# llama3-8b (hidden 4096, 32 layers, 32 heads, 8 kv heads of 128, MLP 14336, vocab 128256, untied), by hand:
# a layer is q 4096x4096, k and v 4096x1024, o 4096x4096, gate/up/down 4096x14336, two norms of 4096
PSI = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096) + 2 * 128256 * 4096 + 4096
# AutoTP at 2 (rank 0's layer: 16 heads, 4 kv heads, MLP 7168; embeddings, lm_head and norms whole)
PSI_TP2 = 32 * (2 * 4096 * 2048 + 2 * 4096 * 512 + 3 * 4096 * 7168 + 2 * 4096) + 2 * 128256 * 4096 + 4096


def setup_of(c):
    return c.estimate.setup


def test_hand_counts():
    assert (PSI, PSI_TP2) == (8_030_261_248, 4_540_600_320)


def test_a_model_that_fits_only_with_autotp_is_sent_to_autotp(compose_cfg):
    """24 GiB at ZeRO-2: without AutoTP every rank holds all 16-bit weights, 2 B x 8.03 B = 14.96 GiB before
    anything else, and even with the optimizer on the CPU the rank does not fit; at tp.size=2 the weights halve."""
    cfg = compose_cfg(L8B + ["cluster.gpu_memory_gb=24", "zero=stage2", "offload=auto", "tp=auto"])
    ranked = candidates(cfg, accepts=RowCheck(cfg))
    whole = [c for c in ranked if setup_of(c).tp_size == 1]
    assert whole and not any(c.fits for c in whole)
    opt_cpu = next(c for c in whole if setup_of(c).optimizer_offload == "cpu")
    assert opt_cpu.estimate.device["params"] == 2 * PSI and opt_cpu.estimate.device["optimizer"] == 0
    assert all(setup_of(c).stage < 3 for c in ranked if setup_of(c).tp_size > 1)  # AutoTP never with ZeRO-3
    result = resolve(cfg, RowCheck)
    winner = ranked[0].estimate
    assert (value(cfg.tp.name), cfg.tp.size, cfg.tp.auto) == ("autotp", 2, False)
    assert value(cfg.offload.optimizer) == "cpu" and result["winner"]["tp_size"] == 2
    assert winner.device["params"] == 2 * PSI_TP2  # 16-bit weights of rank 0's half
    assert "  chosen: zero=stage2 offload=opt-cpu tp=2\n" in result["text"]


def test_autotp_wins_over_cpu_offload_where_it_is_faster(compose_cfg, tmp_path):
    """44 GiB at ZeRO-2: the whole model without offload needs 45.4 GiB; AutoTP at 2 fits without offload and is
    estimated faster than CPU Adam, so it is chosen, and the run dir is the one the typed winner writes."""
    args = L8B + ["cluster.gpu_memory_gb=44", "zero=stage2"]
    cfg = compose_cfg(args + ["offload=auto", "tp=auto"])
    ranked = candidates(cfg, accepts=RowCheck(cfg))
    by_choice = {(setup_of(c).tp_size, setup_of(c).optimizer_offload): c for c in ranked}
    assert not by_choice[(1, "none")].fits and by_choice[(1, "cpu")].fits
    assert ranked[0] is by_choice[(2, "none")]
    assert ranked[0].time.per_sample < by_choice[(1, "cpu")].time.per_sample
    # ZeRO-2 over the 8 / 2 = 4 data-parallel ranks: 2 B weights whole, a 2 B gradient partition and 12 B states / 4;
    # the step's 2 + 4 B copy of the partition exceeds the activations and logits, and gradients carry the excess
    e = ranked[0].estimate
    assert {k: e.device[k] for k in ("params", "gradients", "optimizer")} == {
        "params": 2 * PSI_TP2, "optimizer": 12 * PSI_TP2 // 4,
        "gradients": 2 * PSI_TP2 // 4 + 6 * PSI_TP2 // 4 - e.device["activations"] - e.device["logits"]}
    auto = build(cfg, str(tmp_path), launching=False)
    typed = build(compose_cfg(args + ["offload=none", "tp=autotp", "tp.size=2"]), str(tmp_path), launching=False)
    assert auto.ds_config == typed.ds_config and auto.ds_config["tensor_parallel"]["autotp_size"] == 2
    assert auto.plan["autofit"]["winner"]["tp_size"] == 2


def test_the_runner_up_line_names_what_differs(compose_cfg):
    """With zero=auto too, ZeRO-3 without AutoTP also fits at 44 GiB; it is the runner-up, and the line says how it
    differs from the pick (stage and tp) and by how much per sample."""
    cfg = compose_cfg(L8B + ["cluster.gpu_memory_gb=44", "zero=auto", "offload=auto", "tp=auto"])
    result = resolve(cfg, RowCheck)
    ranked = candidates(compose_cfg(L8B + ["cluster.gpu_memory_gb=44", "zero=auto", "offload=auto", "tp=auto"]),
                        accepts=RowCheck(cfg))
    first, second = ranked[0], ranked[1]
    assert (setup_of(first).stage, setup_of(first).tp_size, setup_of(second).stage, setup_of(second).tp_size) == \
        (2, 2, 3, 1)
    slower = second.time.per_sample / first.time.per_sample - 1
    runner = next(line for line in result["text"].splitlines() if line.startswith("  runner-up: "))
    assert runner.startswith(f"  runner-up: zero=stage3 offload=none tp=1: {second.time.seconds:.3g} s/step "
                             f"(+{slower:.0%} per sample), ")
    assert runner.endswith("GiB per rank; zero 3 vs 2, tp 1 vs 2")
    assert result["versus"] == [runner.strip()]
    gain = 1 - first.time.per_sample / second.time.per_sample
    assert f"; {gain:.0%} faster than zero=stage3 offload=none tp=1, mostly " in result["reason"]


def test_a_tp_size_that_does_not_divide_the_heads_is_never_picked(compose_cfg):
    """qwen2.5-7b has 28 heads and 4 kv heads: tp.size 8 divides neither (28 % 8 = 4, 4 % 8 = 4). At 14 GiB it is
    the only size whose rank would fit, so without the launch's check it would win; with it nothing fits."""
    cfg = compose_cfg(["model=qwen2.5-7b", "cluster=1x8", "cluster.gpu_memory_gb=14", "zero=stage2", "offload=cpu",
                       "tp=auto", "trainer.max_length=2048", "trainer.gradient_checkpointing=true",
                       "trainer.per_device_train_batch_size=1", "batch.global_size=64"])
    unchecked = candidates(cfg)
    assert setup_of(unchecked[0]).tp_size == 8 and unchecked[0].fits
    check = RowCheck(cfg)
    assert any("tp.size=8 must divide model.num_attention_heads=28 and num_key_value_heads=4" in p
               for p in check.problems(setup_of(unchecked[0])))
    assert [setup_of(c).tp_size for c in candidates(cfg, accepts=check)] == [1, 2, 4]
    with pytest.raises(ConfigError, match="none of the 3 candidates fits"):
        resolve(cfg, RowCheck)


def test_16_bit_optimizer_states_only_where_they_are_needed(compose_cfg):
    """ZeRO-2 without offload over 8 ranks: fp32 master, moments and gradients need 45.4 GiB; bf16 master weights and
    moments (2 + 4 B) and bf16 master gradients halve the optimizer side. At 44 GiB only they fit; at 50 GiB both
    fit at the same estimated time and fp32 wins the tie (16-bit changes the numerics)."""
    cfg = compose_cfg(L8B + ["cluster.gpu_memory_gb=44", "zero=stage2", "precision.bf16_optimizer_auto=true"])
    result = resolve(cfg, RowCheck)
    assert (cfg.precision.bf16_master_weights_and_grads, cfg.precision.bf16_optimizer_states) == (True, True)
    assert result["winner"]["bf16_optimizer_states"] and "bf16-opt=all" in result["text"]
    e = candidates(compose_cfg(L8B + ["cluster.gpu_memory_gb=44", "zero=stage2",
                                      "precision.bf16_optimizer_auto=true"]))[0].estimate
    # the 2 B gradient partition; the step's 2 B copy of it is smaller than the activations and logits
    assert (e.device["optimizer"], e.device["gradients"]) == (6 * PSI // 8, 2 * PSI // 8)
    roomy = compose_cfg(L8B + ["cluster.gpu_memory_gb=50", "zero=stage2", "precision.bf16_optimizer_auto=true"])
    result = resolve(roomy, RowCheck)
    assert (roomy.precision.bf16_master_weights_and_grads, roomy.precision.bf16_optimizer_states) == (False, False)
    assert "as fast as zero=stage2 offload=none bf16-opt=all by the estimate" in result["reason"]


def test_16_bit_auto_needs_bf16(compose_cfg):
    cfg = compose_cfg(["precision.bf16_optimizer_auto=true"])  # tiny on CPU ranks: fp32
    assert check_bf16_options(cfg) == [
        "precision.bf16_optimizer_auto=true needs precision=bf16 (precision in force: fp32): the 16-bit optimizer "
        "options live in DeepSpeed's bf16 block. Use precision=bf16 on a GPU cluster, or remove "
        "precision.bf16_optimizer_auto=true."]


def test_ulysses_all_to_all_bytes(compose_cfg):
    """Per layer and pass q, k, v and the output: (2 x 32 + 2 x 8) heads x 128 x 2 B per token; 1024 tokens per rank
    (2048 over sp 2), forward and backward, each rank sending half."""
    arch = architecture(compose_cfg(["model=llama3-8b"]).model)
    assert all_to_all_bytes(arch, 2, 1024, 2) == 2 * 32 * 1024 * (2 * 32 + 2 * 8) * 128 * 2 // 2
    assert all_to_all_bytes(arch, 1, 1024, 2) == 0


def test_tp_and_sp_auto_never_combine(compose_cfg):
    """The tiny model on 2 CPU ranks: tp and sp each at 1 or 2, never both (the check refuses AutoTP with Ulysses),
    ZeRO-3 only without AutoTP; the winner is written back as typed overrides would set it."""
    cfg = compose_cfg(["zero=auto", "tp=auto", "sp=auto"])
    ranked = candidates(cfg, accepts=RowCheck(cfg))
    pairs = {(setup_of(c).tp_size, setup_of(c).sp_size, setup_of(c).stage) for c in ranked}
    assert {(t, s) for t, s, _ in pairs} == {(1, 1), (2, 1), (1, 2)}
    assert not any(t == 2 and stage == 3 for t, _, stage in pairs)
    winner = setup_of(ranked[0])
    resolve(cfg, RowCheck)
    assert (cfg.tp.size, cfg.sp.size, cfg.tp.auto, cfg.sp.auto) == (winner.tp_size, winner.sp_size, False, False)


def plan_text(args):
    out = io.StringIO()
    with redirect_stdout(out):
        assert plan_main(args + ["--fits"]) == 0
    return out.getvalue().splitlines()


def test_plan_shows_the_varied_dimensions_as_columns():
    head = next(line for line in plan_text(L8B + ["cluster.gpu_memory_gb=46", "tp=auto"]) if line.startswith("zero"))
    assert head.split()[:5] == ["zero", "offload", "tp", "ckpt", "micro"]
    lines = plan_text(L8B + ["cluster.gpu_memory_gb=24", "offload=auto"])
    head = next(line for line in lines if line.startswith("zero"))
    assert head.split()[:5] == ["zero", "offload", "ratio", "ckpt", "micro"]
    partial = [line.split() for line in lines if line.split()[:3] == ["3", "opt-cpu", "0.5"]]
    assert partial  # the ratio in its column, the offload without it
    lines = plan_text(L8B + ["cluster.gpu_memory_gb=24"])
    head = next(line for line in lines if line.startswith("zero"))
    assert head.split()[:4] == ["zero", "offload", "ckpt", "micro"]  # nothing varied: the columns as before
