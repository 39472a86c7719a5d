"""Old path of the built-in reward functions, kept so configs naming `trl_ds.rewards.arithmetic_reward` still work:
they live in trl_ds.worker.rewards."""
from trl_ds.worker.rewards import arithmetic_reward

__all__ = ["arithmetic_reward"]
