"""The mistakes users make, each answered by one clear message naming the override and the fix: exit code 2, no
traceback, no rank spawned, no run dir written (and an existing run dir left untouched)."""
import pytest
from conftest import run_app

pytestmark = [pytest.mark.integration, pytest.mark.light]

# (id, overrides, what the message must say)
CATALOGUE = [
    ("unknown-zero-option", ["zero=stage5"], "Could not find 'zero/stage5'"),
    ("unknown-model", ["model=llama4-400b"], "Could not find 'model/llama4-400b'"),
    ("unknown-precision", ["precision=fp8"], "Could not find 'precision/fp8'"),
    ("misspelled-offload-key", ["offload.parm=cpu"], "offload.parm=cpu: offload has no key parm (checked: trl_ds's "
                                                     "keys and DeepSpeed's offload_optimizer / offload_param). Did "
                                                     "you mean offload.param?"),
    ("misspelled-trainer-key", ["trainer.learning_rat=1e-4"], "trainer.learning_rat=0.0001: trainer has no key "
                                                              "learning_rat. Did you mean trainer.learning_rate?"),
    ("int-type", ["trainer.max_steps=ten"], "Value 'ten' of type 'str' could not be converted to Integer"),
    ("float-type", ["trainer.learning_rate=abc"], "Value 'abc' of type 'str' could not be converted to Float"),
    ("bool-type", ["zero.overlap_comm=maybe"], "Value 'maybe' is not a valid bool"),
    ("offload-enum", ["offload.optimizer=disk"], "Invalid value 'disk', expected one of [none, cpu, nvme]"),
    ("micro-zero", ["trainer.per_device_train_batch_size=0"],
     "trainer.per_device_train_batch_size=0 must be a positive integer."),
    ("micro-negative", ["trainer.per_device_train_batch_size=-2"],
     "trainer.per_device_train_batch_size=-2 must be a positive integer."),
    ("accumulation-zero", ["trainer.gradient_accumulation_steps=0"],
     "trainer.gradient_accumulation_steps=0 must be a positive integer."),
    ("max-steps-zero", ["trainer.max_steps=0"], "trainer.max_steps=0 must be at least 1."),
    ("max-length-zero", ["trainer.max_length=0"], "trainer.max_length=0 must be at least 1."),
    ("learning-rate-negative", ["trainer.learning_rate=-1"], "trainer.learning_rate=-1.0 must be positive."),
    ("stage-too-high", ["zero.stage=7"],
     "zero.stage=7 is not a ZeRO stage. Use zero=stage0, stage1, stage2 or stage3."),
    ("stage-negative", ["zero.stage=-1"], "zero.stage=-1 is not a ZeRO stage."),
    ("bucket-zero", ["zero.reduce_bucket_size=0"], "zero.reduce_bucket_size=0 must be positive."),
    ("buffer-count-zero", ["offload.buffer_count=0"], "offload.buffer_count=0 must be positive."),
    ("param-offload-stage2", ["zero=stage2", "offload.param=cpu"],
     "offload.param=cpu needs zero=stage3 (got zero.stage=2); DeepSpeed would silently ignore it. "
     "Use zero=stage3 or offload.param=none."),
    ("nvme-stage1", ["zero=stage1", "offload=nvme"], "offload.optimizer=nvme needs zero=stage3 (got zero.stage=1)"),
    ("optimizer-offload-stage0", ["zero=stage0", "offload=cpu"],
     "offload.optimizer=cpu needs a ZeRO stage of 1 or more (got zero.stage=0)"),
    ("nvme-path-not-writable", ["zero=stage3", "offload=nvme", "offload.nvme_path=/proc/trl_ds_swap"],
     "offload.nvme_path=/proc/trl_ds_swap is not writable (/proc is not a writable folder)"),
    ("nvme-path-is-a-file", ["zero=stage3", "offload=nvme", "offload.nvme_path=/etc/hostname/swap"],
     "offload.nvme_path=/etc/hostname/swap is not writable (/etc/hostname is not a writable folder)"),
    ("global-not-divisible", ["batch.global_size=6"],
     "batch.global_size=6 is not divisible by trainer.per_device_train_batch_size=2 × world 2 = 4. "
     "Set trainer.per_device_train_batch_size=3 or batch.global_size=8."),
    ("global-vs-accumulation", ["batch.global_size=8", "trainer.gradient_accumulation_steps=3"],
     "batch.global_size=8 but trainer.per_device_train_batch_size=2 × world 2 × trainer.gradient_accumulation_steps=3"),
    ("global-zero", ["batch.global_size=0"], "batch.global_size=0 must be a positive integer."),
    ("more-gpus-than-here", ["cluster=1x8"], "cluster=1x8 asks for 8 GPUs per node (cluster.gpus_per_node=8) but this "
                                             "machine has 0. Use dry_run=true"),
    ("ranks-zero", ["cluster.gpus_per_node=0"], "cluster.gpus_per_node=0 must be at least 1."),
    ("nodes-zero", ["cluster.nodes=0"], "cluster.nodes=0 must be at least 1."),
    ("node-rank-too-high", ["cluster=2x8", "cluster.node_rank=2", "dry_run=true"],
     "cluster.node_rank=2 is outside 0..1 for cluster.nodes=2. Use cluster.node_rank=0 to 1."),
    ("node-rank-negative", ["cluster.node_rank=-1"], "cluster.node_rank=-1 is outside 0..0"),
    ("port-out-of-range", ["cluster.master_port=70000"], "cluster.master_port=70000 is not a TCP port."),
    ("bf16-on-cpu", ["precision=bf16"], "precision=bf16 needs a GPU cluster (cluster.device=cpu here)"),
    ("fp16-on-cpu", ["precision=fp16"], "precision=fp16 needs a GPU cluster"),
    ("dataset-missing", ["trainer.dataset_name=/nonexistent/train.jsonl"],
     "trainer.dataset_name=/nonexistent/train.jsonl does not exist."),
    ("model-folder-missing", ["model.name_or_path=/nonexistent/model"],
     "model.name_or_path=/nonexistent/model is not a model folder (no config.json there)."),
    ("kv-heads", ["model.num_key_value_heads=3"], "num_key_value_heads=3 must divide evenly"),
    ("zero3-save-without-gather", ["zero=stage3", "zero.stage3_gather_16bit_weights_on_model_save=false"],
     "save_final_model=true with zero=stage3 needs zero.stage3_gather_16bit_weights_on_model_save=true"),
    ("resume-choice", ["resume=sometimes"], "resume=sometimes is not a choice. Use resume=auto"),
    ("keep-last-zero", ["checkpoint.keep_last=0"], "checkpoint.keep_last=0 must be at least 1."),
    ("checkpoint-every-negative", ["checkpoint.every_steps=-1"],
     "checkpoint.every_steps=-1 must be 0 (off), a number of steps or a"),
    ("passthrough-unknown", ["+trainer.args.packin=true"],
     "trainer.args.packin=true: trainer=sft has no argument packin (checked against ScriptArguments/SFTConfig/"
     "ModelConfig). Closest: packing, eval_packing."),
    ("passthrough-owned", ["+trainer.args.bf16=true"], "trainer.args.bf16=true: trl_ds sets bf16 itself. Use "
                                                       "precision=bf16 instead."),
    ("passthrough-type", ["+trainer.args.packing=maybe"], "trainer.args.packing=maybe must be bool"),
    ("eval-split-missing", ["trainer.eval_strategy=steps", "trainer.dataset_test_split=validation"],
     "trainer.dataset_test_split=validation: the built-in tiny dataset has the splits train and test."),
    ("eval-data-missing", ["trainer.eval_strategy=steps", "trainer.eval_dataset_name=/nonexistent/eval.jsonl"],
     "trainer.eval_dataset_name=/nonexistent/eval.jsonl does not exist."),
    ("epochs-zero", ["trainer.max_steps=-1", "trainer.num_train_epochs=0"],
     "trainer.num_train_epochs=0.0 must be positive with trainer.max_steps=-1."),
    ("secret-in-launch-env", ["+launcher.env.HF_TOKEN=hf_abc"],
     "launcher.env.HF_TOKEN looks like a secret, and trl_ds writes launcher.env into the run dir's scripts."),
]


@pytest.mark.parametrize("overrides,message", [c[1:] for c in CATALOGUE], ids=[c[0] for c in CATALOGUE])
def test_mistake_is_caught_before_launch(overrides, message, tmp_path):
    run_dir = tmp_path / "run"
    out = run_app(overrides, run_dir)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert message in out.stderr
    assert "Traceback" not in out.stdout + out.stderr and "To append to your config" not in out.stderr
    assert not run_dir.exists()  # nothing written, so nothing spawned


def test_run_dir_of_another_config_is_left_untouched(tmp_path):
    run_dir = tmp_path / "run"
    assert run_app(["dry_run=true"], run_dir).returncode == 0
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    out = run_app(["seed=7", "dry_run=true"], run_dir)  # zero.* and cluster.* may change: resume converts
    assert out.returncode == 2
    assert (f"hydra.run.dir={run_dir} already holds a run of another config (seed: 42 → 7); trl_ds does not "
            f"overwrite it.") in out.stderr
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_a_refusal_from_deepspeeds_own_verdict_prints_trl_ds_lines_only(tmp_path):
    """DeepSpeed's verdict imports deepspeed, whose accelerator probe warned "Setting accelerator to CPU" on stdout
    before the one-line refusal; the launcher now prints nothing but its own line."""
    out = run_app(["zero=stage2", "offload=cpu", "zero.zenflow={topk_ratio:1.5}"], tmp_path / "run")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == ("trl_ds: zero.zenflow.topk_ratio=1.5: DeepSpeed 0.19.8 refuses it (DeepSpeedZeroConfig: "
                          "Input should be less than 1). Fix or remove zero.zenflow.topk_ratio.\n")
