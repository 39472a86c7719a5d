"""The recorder of a user's script on a rank: what the two wraps of transformers' classes (worker/patches.py
install_recording) call.

- Trainer.__init__: every Trainer the script builds gets the worker's recording callbacks (worker/records.py);
- Trainer.train: each train() ends through the worker's own end-of-train files, with the script's name and trainer
  count. One called without resume_from_checkpoint resumes, with resume=auto, from the newest complete checkpoint in
  its output_dir, as the worker does."""
from trl_ds.worker.own_steps import OwnAdamSteps
from trl_ds.worker.records import recording_callbacks


class Recorder:
    """The trainers this rank trained, for the summary of a script that trained none."""

    def __init__(self, cfg, run_dir: str, state):
        self.cfg, self.run_dir, self.state = cfg, run_dir, state
        self.trained = 0

    def callbacks(self, trainer):
        """The worker's callbacks (worker/train.py adds the same), for one Trainer of the script."""
        return recording_callbacks(self.cfg, self.run_dir, self.state, trainer, ended=self.ended)

    def ended(self) -> dict:
        """A train() ended (every rank): what its summary adds to the worker's."""
        self.trained += 1
        return {"script": self.cfg.script, "trainers_trained": self.trained}

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


