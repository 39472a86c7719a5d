"""The recorder of a user's script on a rank: what the two wraps of transformers' classes (worker/patches.py
install_recording) call.

- Trainer.__init__: every Trainer the script builds (SFTTrainer, DPOTrainer, ... are Trainers) gets the worker's
  recording callbacks (metrics.jsonl, progress/rank_K.json, checkpoint markers);
- Trainer.train: each finished train() writes memory/rank_K.json (with the engine comparison) and, on rank 0,
  summary.json, exactly as the worker does. A train() called without resume_from_checkpoint resumes, with
  resume=auto, from the newest complete checkpoint in its output_dir, as the worker does: a relaunch of a killed run
  continues it without the script asking.
"""
import os

from trl_ds.rundir.layout import SUMMARY, write_json
from trl_ds.worker.engine_check import write_rank_memory
from trl_ds.worker.own_steps import OwnAdamSteps
from trl_ds.worker.records import recording_callbacks, summarize


class Recorder:
    """The trainers this rank trained, for the summary of a script that trained none."""

    def __init__(self, cfg, run_dir: str, state):
        self.cfg, self.run_dir, self.state = cfg, run_dir, state
        self.trained = 0

    def callbacks(self, trainer):
        """The worker's callbacks (worker/train.py adds the same), for one Trainer of the script."""
        return recording_callbacks(self.cfg, self.run_dir, self.state, trainer)

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


