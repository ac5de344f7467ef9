"""
The shape of a Llama-family model (Llama 2/3.x, Mistral, Qwen2/2.5): its config and tensors.

Read from Hugging Face config.json keys. The forward (llama.py), the GPTQ checkpoint layout
(weights/gptq.py) and the roofline (measurement/roofline.py) all size their work from it, so it
imports nothing else of the engine.
"""

from dataclasses import dataclass
from typing import List, Optional, Tuple

ARCHS = ('llama', 'mistral', 'qwen2')


@dataclass(frozen=True)
class ModelConfig:
    """The shape of a Llama-family model, read from Hugging Face config.json keys."""

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

    @classmethod
    def from_hf(cls, hf: dict) -> 'ModelConfig':
        model_type = hf.get('model_type', 'llama')
        if model_type not in ARCHS:
            raise ValueError(f'model_type {model_type!r} is not one of {", ".join(ARCHS)}')
        if model_type == 'mistral' and hf.get('sliding_window'):
            if hf['sliding_window'] < hf.get('max_position_embeddings', 0):
                raise ValueError('Mistral with a sliding window shorter than its context '
                                 '(v0.1) is not supported; v0.2 and later have none')
        # transformers 5 nests rope settings in rope_parameters; older configs keep them flat.
        rope = dict(hf.get('rope_parameters') or hf.get('rope_scaling') or {})
        theta = float(rope.pop('rope_theta', hf.get('rope_theta', 10000.0)))
        rope_type = rope.get('rope_type', rope.get('type', 'default'))
        if rope_type not in ('default', 'llama3'):
            raise ValueError(f'rope type {rope_type!r} is not supported (default, llama3)')
        heads = hf['num_attention_heads']
        return cls(
            model_type=model_type, vocab_size=hf['vocab_size'], hidden_size=hf['hidden_size'],
            intermediate_size=hf['intermediate_size'], num_layers=hf['num_hidden_layers'],
            num_heads=heads, num_kv_heads=hf.get('num_key_value_heads') or heads,
            head_dim=hf.get('head_dim') or hf['hidden_size'] // heads,
            rms_norm_eps=float(hf.get('rms_norm_eps', 1e-6)), rope_theta=theta,
            rope_scaling=tuple(sorted(rope.items())) if rope_type == 'llama3' else None,
            tie_word_embeddings=bool(hf.get('tie_word_embeddings', False)),
            qkv_bias=model_type == 'qwen2' or bool(hf.get('attention_bias', False)),
            max_position_embeddings=hf.get('max_position_embeddings', 4096))

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim


def tensor_inventory(config: ModelConfig) -> List[Tuple[str, Tuple[int, ...]]]:
    """
    Every weight tensor of a float checkpoint of this shape: (Hugging Face name, shape).

    In file order: the embedding table, per layer its two norms then each linear [out, in]
    (with its bias on qkv_bias models), the final norm, and the lm_head unless it is tied.
    """
    h, i, q, kv = config.hidden_size, config.intermediate_size, config.q_size, config.kv_size
    linears = (('self_attn.q_proj', (q, h)), ('self_attn.k_proj', (kv, h)),
               ('self_attn.v_proj', (kv, h)), ('self_attn.o_proj', (h, q)),
               ('mlp.gate_proj', (i, h)), ('mlp.up_proj', (i, h)), ('mlp.down_proj', (h, i)))
    biased = ('self_attn.q_proj', 'self_attn.k_proj', 'self_attn.v_proj')
    tensors = [('model.embed_tokens.weight', (config.vocab_size, h))]
    for n in range(config.num_layers):
        p = f'model.layers.{n}.'
        tensors += [(p + 'input_layernorm.weight', (h,)),
                    (p + 'post_attention_layernorm.weight', (h,))]
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
