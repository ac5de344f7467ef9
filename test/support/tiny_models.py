"""Tiny random checkpoints of the paper's architectures, shaped like config/models.yaml."""

from physinf_ros.engine.model.llama import KVCache
from physinf_ros.engine.weights.source import synthetic_config
import torch

ARCHS = ('llama-3.1-8b', 'mistral-7b-v0.3', 'qwen2.5-7b')
# The families of issue 53, shrunk: name -> (models.yaml entry, tied, sizes beyond tiny_config's).
FAMILY_CASES = {
    'qwen3': ('qwen3-0.6b', True, {}),
    'qwen3-untied': ('qwen3-8b', False, {}),
    # Four layers: the fourth has no RoPE (no_rope_layer_interval 4).
    'smollm3': ('smollm3-3b', True, {'num_hidden_layers': 4, 'pad_token_id': 0}),
    # Rotary on 12 of 16 dimensions; longrope's long factors from position 16 on.
    'phi3': ('phi-4-mini', True, {
        'original_max_position_embeddings': 16, 'pad_token_id': 0,
        'rope_scaling': {'type': 'longrope', 'short_factor': [1.0, 1.1, 1.3, 1.6, 2.0, 2.5],
                         'long_factor': [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]}}),
    # A sliding layer (window 8), a global one (linear RoPE scaling, as the 4B), a sliding one;
    # smaller weights than tiny_config's, whose scaled embeddings make replies of one token.
    'gemma3': ('gemma-3-4b', True, {
        'layer_types': ['sliding_attention', 'full_attention', 'sliding_attention'],
        'num_hidden_layers': 3, 'sliding_window': 8, 'pad_token_id': 0,
        'initializer_range': 0.05}),
}
# model_types whose tiny checkpoints get random norm weights (transformers starts them all
# alike, which would hide a norm read in the wrong place).
RANDOM_NORMS = ('qwen3', 'smollm3', 'phi3', 'gemma3_text')


def tiny_config(arch, tie=False, sizes=None):
    """Shrink every size of the published config (sizes: others); keep rope, biases and GQA."""
    config = synthetic_config(arch)
    config.update(vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  tie_word_embeddings=tie, initializer_range=0.5, bos_token_id=1,
                  eos_token_id=2, max_position_embeddings=4096)
    config.update(sizes or {})
    if config.get('rope_scaling', {}).get('rope_type') == 'llama3':
        # Keep llama3 scaling meaningful at this size: a short original context.
        config['rope_scaling'] = dict(config['rope_scaling'],
                                      original_max_position_embeddings=64)
    return config


def save_tiny(arch, folder, tie=False, seed=0, sizes=None):
    """Write a random float32 checkpoint (config.json + safetensors) into folder."""
    from transformers import AutoConfig, AutoModelForCausalLM
    config = tiny_config(arch, tie, sizes)
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
    if model.config.model_type in RANDOM_NORMS:
        start = 0.0 if model.config.model_type == 'gemma3_text' else 1.0   # (1 + w) norms
        with torch.no_grad():
            for name, weight in model.named_parameters():
                if name.endswith('norm.weight'):
                    weight.normal_(start, 0.3)
    model.save_pretrained(folder)
    return folder


def save_tiny_gptq(arch, folder, tie=False, seed=0, sizes=None):
    """
    Write a tiny GPTQ checkpoint (round-to-nearest 4-bit) and its float32 dequantisation.

    Returns (gptq_dir, float_dir): transformers loads float_dir, so it is the reference for
    the 4-bit kernels on the very same weights.
    """
    from pathlib import Path
    from physinf_ros.engine.weights.gptq_files import quantize_hf_dir
    folder = Path(folder)
    quantize_hf_dir(save_tiny(arch, folder / 'float', tie, seed, sizes), folder / 'gptq')
    return folder / 'gptq', dequantised_copy(folder / 'gptq', folder / 'dequantised')


def dequantised_copy(gptq_dir, out):
    """Write the exact float32 dequantisation of a GPTQ directory (tokenizer files too)."""
    import json
    from pathlib import Path
    import shutil
    from physinf_ros.engine.model.llama import read_state
    from physinf_ros.engine.weights import gptq
    from safetensors.torch import save_file
    gptq_dir, out = Path(gptq_dir), Path(out)
    shutil.copytree(gptq_dir, out, ignore=shutil.ignore_patterns('*.safetensors*'))
    state = gptq.dequantize_state(read_state(gptq_dir))
    state = {k: v.float().contiguous() for k, v in state.items()}
    save_file(state, str(out / 'model.safetensors'))
    config = json.loads((out / 'config.json').read_text())
    config.pop('quantization_config')
    config['torch_dtype'] = 'float32'
    (out / 'config.json').write_text(json.dumps(config))
    return out


def twin_caches(config, max_context, device, dtype):
    """Two KV caches of config holding the same random keys and values: reference and kernel."""
    caches = [KVCache.allocate(config, max_context, device, dtype) for _ in range(2)]
    for name in ('k', 'v'):
        getattr(caches[0], name).copy_(torch.randn(getattr(caches[0], name).shape,
                                                   device=device).to(dtype))
        getattr(caches[1], name).copy_(getattr(caches[0], name))
    return caches
