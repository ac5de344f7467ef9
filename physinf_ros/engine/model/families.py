"""
The families our engine decodes: which module of model/ runs a config, and loading through it.

config.FAMILIES maps each model_type to its module; each module offers the same functions
(from_state_dict, rope_tables, prompt_logits, decode_layers and llama's KVCache), so the
decoder, the loaders and the backend table reach every family through `module(config)`.
"""

from pathlib import Path
from types import ModuleType
from typing import Optional

import torch

from . import gemma3, llama, phi3, qwen3, smollm3
from .config import ARCHS, FAMILIES, ModelConfig
from .llama import KVCache, Weights

MODULES = {'llama': llama, 'qwen3': qwen3, 'smollm3': smollm3, 'phi3': phi3,
           'gemma3': gemma3}
SUPPORTED = ARCHS   # the model_types of config.json our engine decodes


def module(config: ModelConfig) -> ModuleType:
    """Return the module of model/ that holds config's forward."""
    return MODULES[FAMILIES[config.model_type]]


def prefill(family: ModuleType, w: Weights, cache: KVCache, ids: torch.Tensor,
            cos: torch.Tensor, sin: torch.Tensor, start: int = 0,
            ops: llama.PromptOps = llama.TORCH_PROMPT) -> torch.Tensor:
    """
    Run prompt ids [n] from position start, fill the cache, return float32 logits [vocab].

    start > 0 continues a sequence whose first start tokens' keys and values the cache holds
    (where the family's REUSES_PREFIX allows it); ops does the work besides the matrix
    products and makes a 4-bit linear a float weight (llama.PromptOps).
    """
    return family.prompt_logits(w, cache, ids, cos, sin, last_only=True, start=start,
                                ops=ops)[0]


def supported(hf: dict) -> Optional[str]:
    """Why our engine cannot decode the model of config.json hf, or None if it can."""
    try:
        ModelConfig.from_hf(hf)
    except KeyError as exc:
        return f'config.json lacks {exc}'
    except ValueError as exc:
        return str(exc)
    return None


def load_hf_dir(path: Path, device: torch.device, dtype: torch.dtype, packed: bool = True,
                hf: Optional[dict] = None) -> Weights:
    """Weights of any family from a Hugging Face directory (llama.read_checkpoint)."""
    config, state = llama.read_checkpoint(path, packed, hf)
    return module(config).from_state_dict(config, state, device, dtype)


def synthetic_weights(config: ModelConfig, device: torch.device, dtype: torch.dtype,
                      seed: int = 0) -> Weights:
    """Random weights of config's shape (llama.synthetic_state_dict), fused for its family."""
    state = llama.synthetic_state_dict(config, device, dtype, seed)
    return module(config).from_state_dict(config, state, device, dtype)
