"""Model architectures in code: the tiny model built from its dimensions, and its word-level tokenizer."""
import os

from trl_ds.worker.data import SPECIAL_TOKENS, VOCABULARY

HF_CONFIG_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                  "num_key_value_heads", "max_position_embeddings", "tie_word_embeddings")


def hf_config(model_cfg):
    """A transformers config with exactly the preset's dimensions (no download)."""
    from transformers import AutoConfig

    from trl_ds.config.model_source import preset_config

    kwargs = {k: model_cfg[k] for k in HF_CONFIG_KEYS}
    extra = {k: v for k, v in preset_config(model_cfg).items() if k != "model_type"}
    return AutoConfig.for_model(model_cfg.model_type, **{**kwargs, **extra})


def build_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {word: i for i, word in enumerate(VOCABULARY)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    pad, unk, bos, eos = SPECIAL_TOKENS
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=pad, unk_token=unk, bos_token=bos, eos_token=eos)


# AutoTokenizer builds the family's own class for some model types whatever tokenizer_class says (qwen2:
# Qwen2Tokenizer, which re-reads the word-level vocabulary as byte-level BPE); a folder that names its own tokenizer
# code in auto_map skips that rule, and is then loaded by tokenizer_class, or with trust_remote_code by this class.
# Both are the generic fast tokenizer, which takes tokenizer.json as it is.
TOKENIZER_MODULE = "tokenization_word_level"
TOKENIZER_CODE = ('"""trl_ds\'s built-in word-level tokenizer: tokenizer.json as it is, for any model_type."""\n'
                  "from transformers import PreTrainedTokenizerFast\n\n\n"
                  "class WordLevelTokenizer(PreTrainedTokenizerFast):\n    pass\n")


def save_tokenizer(tokenizer, folder: str) -> None:
    """Save the built-in tokenizer so that AutoTokenizer and AutoProcessor load it as itself for any model_type."""
    tokenizer.init_kwargs["auto_map"] = {"AutoTokenizer": [None, f"{TOKENIZER_MODULE}.WordLevelTokenizer"]}
    tokenizer.save_pretrained(folder)
    with open(os.path.join(folder, f"{TOKENIZER_MODULE}.py"), "w") as f:
        f.write(TOKENIZER_CODE)


def save_tiny_model(model_cfg, folder: str, seed: int) -> None:
    """Build the tiny model with a fixed seed and save it with its tokenizer, atomically: every rank then loads it
    by path (the real loading code, ZeRO-3's partitioned init), and every stage starts from the same weights."""
    import torch
    from transformers import AutoModelForCausalLM

    if os.path.isfile(os.path.join(folder, "config.json")):
        return
    config = hf_config(model_cfg)
    tokenizer = build_tokenizer()
    if len(tokenizer) > config.vocab_size:
        raise ValueError(f"tiny vocabulary {len(tokenizer)} exceeds model.vocab_size={config.vocab_size}")
    config.pad_token_id, config.bos_token_id, config.eos_token_id = (
        tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    staging = f"{folder}.tmp-{os.getpid()}"
    # Not model.save_pretrained: under torch.distributed it writes only on global rank 0, and every node's first
    # rank builds its own copy (run dirs need not be on a shared filesystem).
    from safetensors.torch import save_model
    os.makedirs(staging)
    config.architectures = [type(model).__name__]  # as save_pretrained records it; TRL builds DPO's reference from it
    config.save_pretrained(staging)
    save_model(model, os.path.join(staging, "model.safetensors"), metadata={"format": "pt"})
    save_tokenizer(tokenizer, staging)
    try:
        os.rename(staging, folder)
    except OSError:  # another node's first rank saved the same weights first
        import shutil
        shutil.rmtree(staging, ignore_errors=True)
