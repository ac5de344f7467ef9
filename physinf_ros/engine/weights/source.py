"""
A resolved model: its directory and config.json (ModelSource), and where converted copies live.

The spec grammar that makes one is resolve.py's; the forward, the GPTQ format and the backends
read only what is here, so this module imports nothing of the engine but its errors.
"""

from dataclasses import dataclass
import json
import os
from pathlib import Path
from typing import Optional

from ..base import EngineError


@dataclass(frozen=True)
class ModelSource:
    """A resolved spec: a directory transformers can load (None: synthetic) and its config."""

    spec: str
    name: str
    path: Optional[Path]
    hf_config: dict   # config.json, parsed once (synthetic models: the one they would have)

    @property
    def synthetic(self) -> bool:
        """Random weights made at load: no directory, no tokenizer."""
        return self.path is None

    @property
    def quant_method(self) -> Optional[str]:
        return quant_method(self.hf_config)


def quant_method(hf: dict) -> Optional[str]:
    """'gptq', 'exl2' (or another method) for quantised config.json contents, else None."""
    return (hf.get('quantization_config') or {}).get('quant_method')


def cache_root() -> Path:
    """Where converted models live: $PHYSINF_ROS_CACHE, else the XDG cache directory."""
    if os.environ.get('PHYSINF_ROS_CACHE'):
        return Path(os.environ['PHYSINF_ROS_CACHE'])
    base = os.environ.get('XDG_CACHE_HOME') or os.path.join(Path.home(), '.cache')
    return Path(base) / 'physinf_ros'


def read_config(config_file: Path) -> dict:
    """Read a model's config.json; a broken one is an error that names the file."""
    try:
        config = json.loads(config_file.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise EngineError(f'{config_file} could not be read as JSON ({exc}): '
                          'restore the model directory') from None
    if not isinstance(config, dict):
        raise EngineError(f'{config_file} holds a JSON {type(config).__name__}, not an object: '
                          'restore the model directory')
    return config


def synthetic_config(arch: str) -> dict:
    """Read the Hugging Face config of a published architecture from config/models.yaml."""
    import yaml
    from ...resources import config_path
    shapes = yaml.safe_load(config_path('models.yaml').read_text())
    if arch not in shapes:
        raise EngineError(f'unknown synthetic architecture {arch!r}: choose one of '
                          + ', '.join(f'synthetic:{name}' for name in shapes))
    return dict(shapes[arch])


def stop_token_ids(source: ModelSource, tokenizer) -> frozenset:
    """Token ids that end a reply: the tokenizer's EOS plus generation_config's."""
    ids = set()
    if tokenizer is not None and tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    if source.synthetic:
        eos = source.hf_config.get('eos_token_id')
    elif (source.path / 'generation_config.json').is_file():
        eos = json.loads((source.path / 'generation_config.json').read_text()).get('eos_token_id')
    else:
        eos = None
    ids.update([eos] if isinstance(eos, int) else (eos or []))
    return frozenset(ids)
