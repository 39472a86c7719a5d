import pytest

from trl_ds.config.batch import Batch, resolve_batch
from trl_ds.errors import ConfigError


def test_accumulation_defaults_to_one():
    assert resolve_batch(micro=2, world=2, accumulation=None, global_size=None) == Batch(2, 2, 1)


def test_global_size_derives_accumulation_for_each_cluster():
    # the same global batch on 1x8 and 2x8: accumulation halves when the world doubles
    assert resolve_batch(4, 8, None, 64).accumulation == 2
    assert resolve_batch(4, 16, None, 64).accumulation == 1
    assert resolve_batch(4, 16, None, 64).global_size == 64


def test_design_example_message():
    with pytest.raises(ConfigError, match=r"batch.global_size=32 is not divisible by "
                       r"trainer.per_device_train_batch_size=3 × world 16 = 48\. "
                       r"Set trainer.per_device_train_batch_size=2 or batch.global_size=48\."):
        resolve_batch(3, 16, None, 32)


def test_explicit_accumulation_must_agree_with_global():
    with pytest.raises(ConfigError, match=r"batch.global_size=64 but trainer.per_device_train_batch_size=2 × "
                       r"world 8 × trainer.gradient_accumulation_steps=2 = 32\. Drop "
                       r"trainer.gradient_accumulation_steps .* or set batch.global_size=32\."):
        resolve_batch(2, 8, 2, 64)
    assert resolve_batch(2, 8, 4, 64) == Batch(2, 8, 4)


def test_non_positive_values_are_named():
    with pytest.raises(ConfigError) as err:
        resolve_batch(0, 2, -1, None)
    assert err.value.problems == ["trainer.per_device_train_batch_size=0 must be a positive integer.",
                                  "trainer.gradient_accumulation_steps=-1 must be a positive integer."]
