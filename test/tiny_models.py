"""Tiny random checkpoints of the paper's architectures, shaped like config/models.yaml."""

from physinf_ros.engine.models import synthetic_config
import torch

ARCHS = ('llama-3.1-8b', 'mistral-7b-v0.3', 'qwen2.5-7b')


def tiny_config(arch, tie=False):
    """Shrink every size of the published config; keep rope scaling, biases and GQA."""
    config = synthetic_config(arch)
    config.update(vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  tie_word_embeddings=tie, initializer_range=0.5, bos_token_id=1,
                  eos_token_id=2, max_position_embeddings=4096)
    if 'rope_scaling' in config:
        # Keep llama3 scaling meaningful at this size: a short original context.
        config['rope_scaling'] = dict(config['rope_scaling'],
                                      original_max_position_embeddings=64)
    return config


def save_tiny(arch, folder, tie=False, seed=0):
    """Write a random float32 checkpoint (config.json + safetensors) into folder."""
    from transformers import AutoConfig, AutoModelForCausalLM
    config = tiny_config(arch, tie)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(
        AutoConfig.for_model(config.pop('model_type'), **config), dtype=torch.float32)
    if model.config.model_type == 'qwen2':
        # transformers initialises biases at zero; make them count.
        with torch.no_grad():
            for layer in model.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj,
                             layer.self_attn.v_proj):
                    proj.bias.normal_(0.0, 0.5)
    model.save_pretrained(folder)
    return folder
