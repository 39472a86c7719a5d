"""What trl_ds adds to a user's script on a rank, without editing it: two wraps of transformers' classes.

- TrainingArguments.__post_init__: `accelerator_config.use_configured_state`, so the trainer adopts the process
  group the bootstrap joined (on CPU accelerate would otherwise count one process per rank; worker/train.py).
- Trainer.__init__ / Trainer.train: every Trainer the script builds (SFTTrainer, DPOTrainer, ... are Trainers) gets
  the worker's recording callbacks (metrics.jsonl, progress/rank_K.json, checkpoint markers), and each finished
  train() writes memory/rank_K.json and, on rank 0, summary.json, exactly as the worker does. A train() called
  without resume_from_checkpoint resumes, with resume=auto, from the newest complete checkpoint in its output_dir,
  as the worker does: a relaunch of a killed run continues it without the script asking.
"""
import functools
import json
import os
import time

from trl_ds.config.topology import topology
from trl_ds.rundir.layout import METRICS, SUMMARY, write_json
from trl_ds.worker.engine_check import write_rank_memory
from trl_ds.worker.own_steps import OwnAdamSteps
from trl_ds.worker.records import MetricsLogger, summarize


class Recorder:
    """The trainers this rank trained, for the summary of a script that trained none."""

    def __init__(self, cfg, run_dir: str, state):
        self.cfg, self.run_dir, self.state = cfg, run_dir, state
        self.trained = 0

    def callbacks(self, trainer):
        """The worker's callbacks (worker/train.py adds the same), for one Trainer of the script."""
        from trl_ds.worker.train import recording_callbacks

        logger = MetricsLogger(os.path.join(self.run_dir, METRICS), topology(self.cfg).shares_samples)
        return [logger, *recording_callbacks(self.cfg, self.run_dir, self.state, trainer)]

    def resume_point(self, trainer):
        """The checkpoint a train() without resume_from_checkpoint continues from (the worker's choice, in the
        trainer's output_dir), or None. One of another cluster shape was converted to DeepSpeed's universal format
        (by the launcher, or here): the engine, built in train(), is told to load that, as the worker's is."""
        from trl_ds.worker.train import choose_resume

        if self.cfg.resume != "auto":
            return None
        chosen, universal = choose_resume(self.cfg, trainer.args.output_dir, self.state)
        if universal:
            config = trainer.accelerator.state.deepspeed_plugin.hf_ds_config.config  # what deepspeed_init reads
            config["checkpoint"] = {**config.get("checkpoint", {}), "load_universal": True}
            if self.cfg.zero.stage == 3:  # as the worker: DeepSpeed's stage-3 universal load shares one Adam step
                trainer.add_callback(OwnAdamSteps())
        return chosen

    def record(self, trainer, result, wall: float, resumed: bool) -> None:
        """After train() returns: before the script saves (a ZeRO-3 save gathers weights) or ends the process group."""
        state = self.state
        self.trained += 1
        found = write_rank_memory(trainer, self.cfg, self.run_dir, state.process_index)
        if state.is_main_process:
            summary = summarize(self.run_dir, trainer, result.metrics, wall, state, resumed=resumed)
            write_json(os.path.join(self.run_dir, SUMMARY), {**summary, "script": self.cfg.script,
                                                             "trainers_trained": self.trained,
                                                             "engine_differences": found})


def install(recorder: Recorder) -> None:
    import transformers

    use_configured_state(transformers.TrainingArguments)
    record_trainers(transformers.Trainer, recorder)


def use_configured_state(cls) -> None:
    original = cls.__post_init__

    @functools.wraps(original)
    def post_init(self):
        self.accelerator_config = with_configured_state(self.accelerator_config)
        original(self)

    cls.__post_init__ = post_init


def with_configured_state(config):
    """accelerator_config in any form TrainingArguments takes (None, a dict, a JSON file, the object), plus the flag."""
    if config is None:
        return {"use_configured_state": True}
    if isinstance(config, str):
        with open(config) as f:
            config = json.load(f)
    if isinstance(config, dict):
        return {**config, "use_configured_state": True}
    config.use_configured_state = True
    return config


def record_trainers(cls, recorder: Recorder) -> None:
    original_init, original_train = cls.__init__, cls.train

    @functools.wraps(original_init)
    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        for callback in recorder.callbacks(self):
            self.add_callback(callback)

    @functools.wraps(original_train)
    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        if resume_from_checkpoint is None:  # the script's own choice (a path, True, False) is kept
            resume_from_checkpoint = recorder.resume_point(self)
        started = time.time()
        result = original_train(self, resume_from_checkpoint, *args, **kwargs)
        recorder.record(self, result, time.time() - started, resumed=bool(resume_from_checkpoint))
        return result

    cls.__init__, cls.train = init, train
