"""Built-in reward functions for GRPO and RLOO: `arithmetic_reward` scores completions of the tiny arithmetic prompts
against their `answer` column, which both trainers pass as a keyword argument.
"""
from typing import List

from trl_ds.worker.data import NUMBERS

RIGHT = 1.0
A_NUMBER = 0.25  # partial credit keeps the rewards within a group apart while the model is still random


def arithmetic_reward(completions, answer, **kwargs) -> List[float]:
    """1.0 when the completion's first word is the right sum, 0.25 for another number word, 0.0 otherwise."""
    return [_score(_text(completion), expected) for completion, expected in zip(completions, answer)]


def _score(text: str, expected: str) -> float:
    words = text.split()
    first = words[0] if words else ""
    if first == expected:
        return RIGHT
    return A_NUMBER if first in NUMBERS else 0.0


def _text(completion) -> str:
    """Plain-text completions are strings; conversational ones are lists of messages."""
    return completion if isinstance(completion, str) else completion[-1]["content"]
