"""
The shape of a model our engine runs: its config and tensors, for every family it decodes.

Read from Hugging Face config.json keys (transformers' configuration_*.py are the reference for
each field). The forwards (llama.py and the other family files, FAMILIES), the GPTQ checkpoint
layout (weights/gptq.py) and the roofline (measurement/roofline.py) all size their work from it,
so it imports nothing else of the engine.
"""

from dataclasses import dataclass
from typing import List, Optional, Tuple

# model_type -> the module of model/ that holds its forward: the families our engine decodes.
FAMILIES = {'llama': 'llama', 'mistral': 'llama', 'qwen2': 'llama', 'qwen3': 'qwen3',
            'smollm3': 'smollm3', 'phi3': 'phi3', 'gemma3_text': 'gemma3', 'gemma3': 'gemma3'}
ARCHS = tuple(FAMILIES)
# Rope types read here: transformers' names (modeling_rope_utils.py).
ROPE_TYPES = ('default', 'llama3', 'longrope', 'linear')


# What transformers assumes where a config.json leaves a key out (Gemma3TextConfig's defaults:
# gemma-3-4b's config.json, for one, writes only what differs from them in its text_config).
DEFAULTS = {
    'gemma3_text': {'vocab_size': 262208, 'hidden_size': 2304, 'intermediate_size': 9216,
                    'num_hidden_layers': 26, 'num_attention_heads': 8,
                    'num_key_value_heads': 4, 'head_dim': 256, 'rms_norm_eps': 1e-6,
                    'hidden_activation': 'gelu_pytorch_tanh', 'max_position_embeddings': 131072,
                    'query_pre_attn_scalar': 256, 'sliding_window': 4096,
                    'rope_theta': 1000000.0, 'rope_local_base_freq': 10000.0,
                    'tie_word_embeddings': True},
    'smollm3': {'tie_word_embeddings': True, 'rope_theta': 2000000.0},
    'qwen3': {'rms_norm_eps': 1e-6, 'head_dim': 128},
}
QK_NORM = ('qwen3', 'gemma3_text')         # RMSNorm of each q and k head before RoPE
ACTIVATIONS = {'silu': 'silu', 'gelu_pytorch_tanh': 'gelu_tanh'}
# Head sizes our kernels take: their tiles span a head in powers of two (tl.arange), and
# tl.dot's products want 16 columns at least. Every published shape's is 64, 128 or 256.
HEAD_DIMS = (16, 32, 64, 128, 256)


def _hashable(value):
    return tuple(value) if isinstance(value, list) else value


def _rope_fields(hf: dict, layer_type: str) -> Tuple[float, dict]:
    """Return (theta, scaling keys) of one layer type's RoPE, from either config format."""
    params = hf.get('rope_parameters') or {}
    if layer_type in params:   # transformers 5, per layer type (Gemma 3)
        rope = dict(params[layer_type] or {})
    elif layer_type == 'sliding_attention':   # the old Gemma 3 format: local layers unscaled
        rope = {'rope_theta': hf.get('rope_local_base_freq', 10000.0)}
    else:
        rope = dict(params or hf.get('rope_scaling') or {})
    theta = float(rope.pop('rope_theta', hf.get('rope_theta', 10000.0)))
    return theta, rope


def _scaling(hf: dict, rope: dict) -> Optional[tuple]:
    """Return a RoPE scaling as sorted (key, value) pairs, or None for plain RoPE."""
    rope_type = rope.get('rope_type', rope.get('type', 'default'))
    if rope_type in ('su', 'yarn') and hf.get('model_type') == 'phi3':
        rope_type = 'longrope'   # Phi-3's old names for it (Phi3Config)
    if rope_type not in ROPE_TYPES:
        raise ValueError(f'rope type {rope_type!r} is not supported ({", ".join(ROPE_TYPES)})')
    if rope_type == 'default':
        return None
    keep = {key: _hashable(value) for key, value in rope.items()
            if key not in ('type', 'rope_type', 'partial_rotary_factor')}
    keep['rope_type'] = rope_type
    if rope_type == 'longrope':
        # Phi-3 keeps the pretraining length at the top level, and it wins (transformers 5's
        # standardize_rope_params); the attention factor follows from the extension's ratio.
        original = hf.get('original_max_position_embeddings',
                          keep.get('original_max_position_embeddings'))
        keep['original_max_position_embeddings'] = original
        keep.setdefault('factor', hf.get('max_position_embeddings', original) / original)
    return tuple(sorted(keep.items()))


@dataclass(frozen=True)
class ModelConfig:
    """
    The shape of a model, read from Hugging Face config.json keys.

    Beyond the Llama shape: q/k norm (Qwen3, Gemma 3), partial rotary (Phi-3), layers without
    RoPE (SmolLM3), sliding-window layers with their own RoPE base (Gemma 3), the attention
    scale and the MLP's activation.
    """

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: Optional[tuple] = None   # sorted (key, value) pairs, e.g. llama3's
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    max_position_embeddings: int = 4096
    qk_norm: bool = False
    partial_rotary_factor: float = 1.0
    nope_layers: Tuple[int, ...] = ()       # layers whose q and k are not rotated
    sliding_window: int = 0                 # keys a sliding layer attends to, itself included
    sliding_layers: Tuple[int, ...] = ()
    local_rope_theta: float = 0.0           # the sliding layers' RoPE base (Gemma 3)
    query_pre_attn_scalar: float = 0.0      # attention scale 1/sqrt(this); 0: 1/sqrt(head_dim)
    hidden_act: str = 'silu'                # of ACTIVATIONS' values

    @classmethod
    def from_hf(cls, hf: dict) -> 'ModelConfig':
        model_type = hf.get('model_type', 'llama')
        if model_type not in ARCHS:
            raise ValueError(f'model_type {model_type!r} is not one of {", ".join(ARCHS)}')
        if model_type == 'gemma3':   # the multimodal checkpoint: its language model
            hf = dict(hf.get('text_config') or {}, model_type='gemma3_text',
                      tie_word_embeddings=hf.get('tie_word_embeddings', True))
        hf = dict(DEFAULTS.get(hf.get('model_type', model_type), {}), **hf)
        if model_type in ('mistral', 'phi3') and hf.get('sliding_window'):
            # Mistral v0.1, Phi-3-mini-4k; Phi-4-mini's window is longer than its context.
            if hf['sliding_window'] < hf.get('max_position_embeddings', 0):
                raise ValueError(f'{model_type} with a sliding window shorter than its context '
                                 'is not supported')
        for key in ('attn_logit_softcapping', 'final_logit_softcapping'):
            if hf.get(key) is not None:
                raise ValueError(f'{key} is not supported (Gemma 3 has none)')
        if hf.get('use_bidirectional_attention'):   # EmbeddingGemma: an encoder, no decoder
            raise ValueError('use_bidirectional_attention (an embedding model) is not supported')
        layers = hf['num_hidden_layers']
        # transformers 5 nests rope settings in rope_parameters; older configs keep them flat.
        theta, rope = _rope_fields(hf, 'full_attention')
        partial = float(rope.get('partial_rotary_factor', hf.get('partial_rotary_factor', 1.0)))
        sliding, window, local_theta = (), 0, 0.0
        if hf['model_type'] == 'gemma3_text':
            pattern = hf.get('sliding_window_pattern', 6)
            types = hf.get('layer_types') or [
                'sliding_attention' if (i + 1) % pattern else 'full_attention'
                for i in range(layers)]
            sliding = tuple(i for i, kind in enumerate(types) if kind == 'sliding_attention')
            window = int(hf['sliding_window'])
            local_theta, local = _rope_fields(hf, 'sliding_attention')
            if _scaling(hf, local) is not None:
                raise ValueError('RoPE scaling on the sliding layers is not supported')
        elif hf.get('use_sliding_window') and hf.get('sliding_window'):
            raise ValueError(f'{model_type} with use_sliding_window is not supported')
        nope = ()
        if model_type == 'smollm3':   # no_rope_layers[i] is 1 where layer i uses RoPE
            uses = hf.get('no_rope_layers') or [
                int((i + 1) % hf.get('no_rope_layer_interval', 4) != 0) for i in range(layers)]
            nope = tuple(i for i, use in enumerate(uses) if not use)
        act = hf.get('hidden_activation') or hf.get('hidden_act', 'silu')
        if act not in ACTIVATIONS:
            raise ValueError(f'activation {act!r} is not supported ({", ".join(ACTIVATIONS)})')
        heads = hf['num_attention_heads']
        head_dim = hf.get('head_dim') or hf['hidden_size'] // heads
        if head_dim not in HEAD_DIMS:
            raise ValueError(f'head size {head_dim} is not supported: our kernels take heads of '
                             f'{", ".join(map(str, HEAD_DIMS))} (Phi-3.5-mini\'s 96 is not one)')
        return cls(
            model_type=model_type, vocab_size=hf['vocab_size'], hidden_size=hf['hidden_size'],
            intermediate_size=hf['intermediate_size'], num_layers=layers,
            num_heads=heads, num_kv_heads=hf.get('num_key_value_heads') or heads,
            head_dim=head_dim,
            rms_norm_eps=float(hf.get('rms_norm_eps', 1e-6)), rope_theta=theta,
            rope_scaling=_scaling(hf, rope),
            tie_word_embeddings=bool(hf.get('tie_word_embeddings', False)),
            qkv_bias=model_type == 'qwen2' or bool(hf.get('attention_bias', False)),
            max_position_embeddings=hf.get('max_position_embeddings', 4096),
            qk_norm=hf['model_type'] in QK_NORM, partial_rotary_factor=partial,
            nope_layers=nope, sliding_window=window, sliding_layers=sliding,
            local_rope_theta=float(local_theta),
            query_pre_attn_scalar=float(hf.get('query_pre_attn_scalar') or 0.0),
            hidden_act=ACTIVATIONS[act])

    @property
    def family(self) -> str:
        """Name the module of model/ that runs this config (FAMILIES)."""
        return FAMILIES[self.model_type]

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def rotary_dim(self) -> int:
        """Leading dimensions of each q and k head that RoPE rotates (Phi-3: 3/4 of them)."""
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def attention_scale(self) -> float:
        return (self.query_pre_attn_scalar or self.head_dim) ** -0.5

    @property
    def norm_offset(self) -> float:
        """Return what a norm adds to its weight: 1 where it scales by (1 + weight), Gemma's."""
        return 1.0 if self.family == 'gemma3' else 0.0


def tensor_inventory(config: ModelConfig) -> List[Tuple[str, Tuple[int, ...]]]:
    """
    Every weight tensor of a float checkpoint of this shape: (Hugging Face name, shape).

    In file order: the embedding table, per layer its norms then each linear [out, in] (with
    its bias on qkv_bias models), the final norm, and the lm_head unless it is tied. Phi-3
    checkpoints hold QKV and gate/up fused; Gemma 3 has four norms a layer.
    """
    h, i, q, kv = config.hidden_size, config.intermediate_size, config.q_size, config.kv_size
    if config.family == 'phi3':
        linears = (('self_attn.qkv_proj', (q + 2 * kv, h)), ('self_attn.o_proj', (h, q)),
                   ('mlp.gate_up_proj', (2 * i, h)), ('mlp.down_proj', (h, i)))
    else:
        linears = (('self_attn.q_proj', (q, h)), ('self_attn.k_proj', (kv, h)),
                   ('self_attn.v_proj', (kv, h)), ('self_attn.o_proj', (h, q)),
                   ('mlp.gate_proj', (i, h)), ('mlp.up_proj', (i, h)),
                   ('mlp.down_proj', (h, i)))
    norms = ['input_layernorm', 'post_attention_layernorm']
    if config.family == 'gemma3':
        norms += ['pre_feedforward_layernorm', 'post_feedforward_layernorm']
    head_norms = ('self_attn.q_norm', 'self_attn.k_norm') if config.qk_norm else ()
    biased = ('self_attn.q_proj', 'self_attn.k_proj', 'self_attn.v_proj')
    tensors = [('model.embed_tokens.weight', (config.vocab_size, h))]
    for n in range(config.num_layers):
        p = f'model.layers.{n}.'
        tensors += [(p + norm + '.weight', (h,)) for norm in norms]
        tensors += [(p + norm + '.weight', (config.head_dim,)) for norm in head_norms]
        for name, shape in linears:
            tensors.append((p + name + '.weight', shape))
            if config.qkv_bias and name in biased:
                tensors.append((p + name + '.bias', shape[:1]))
    tensors.append(('model.norm.weight', (h,)))
    if not config.tie_word_embeddings:
        tensors.append(('lm_head.weight', (config.vocab_size, h)))
    return tensors


def is_norm(name: str) -> bool:
    """Say whether a tensor of tensor_inventory is a norm's weight (a vector of ones at init)."""
    return name.endswith('norm.weight')
