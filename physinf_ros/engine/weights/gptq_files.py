"""
Writing GPTQ model directories: random synthetic ones, or a float checkpoint quantised by RTN.

Both stream. The tensors of gptq.checkpoint_plan are produced one at a time (large fp16 tables
in row chunks) and written straight into safetensors shards whose headers are known up front,
so an 8B checkpoint (5.7 GB) is written with a few hundred MB of memory and no float copy of
the model. The directory holds what exllamav2 0.3.2 and our own loader read: config.json with
flat rope keys and `architectures` (exllamav2 reads neither transformers 5's `rope_parameters`
nor a missing architecture), quantize_config.json, generation_config.json, the tokenizer files
of the source, and the shards with their index.
"""

import json
import math
from pathlib import Path
import shutil
import struct
from typing import Dict, Iterator, List, Optional, Sequence

import torch

from .gptq import ARCHITECTURES, checkpoint_plan, GptqSpec, pick_group_size, quantize, TensorSpec
from .source import read_config
from ..model.config import ModelConfig

SHARD_BYTES = 2 * 1024 ** 3
ROWS_PER_CHUNK = 8192
SAFETENSORS_DTYPES = {torch.int32: 'I32', torch.float16: 'F16'}
# Synthetic codes are uniform on 0..15 around zero 8: (code - 8) has standard deviation
# sqrt((16^2 - 1) / 12). Scales near 0.02 / that give weights of std 0.02, as the bf16
# synthetic models and transformers' initialisation have.
CODE_STD = math.sqrt((16 ** 2 - 1) / 12)
SYNTHETIC_SCALE = 0.02 / CODE_STD
WEIGHT_FILES = ('.safetensors', '.bin', '.pt', '.gguf')
WRITTEN_HERE = ('config.json', 'quantize_config.json', 'model.safetensors.index.json')


def write_safetensors(path: Path, specs: Sequence[TensorSpec], chunks: Iterator[torch.Tensor],
                      metadata: Optional[Dict[str, str]] = None) -> None:
    """Write one safetensors file whose tensors' bytes come from chunks, in specs order."""
    header, offset = {}, 0
    for spec in specs:
        header[spec.name] = {'dtype': SAFETENSORS_DTYPES[spec.dtype], 'shape': list(spec.shape),
                             'data_offsets': [offset, offset + spec.nbytes]}
        offset += spec.nbytes
    header['__metadata__'] = metadata or {'format': 'pt'}
    raw = json.dumps(header, separators=(',', ':')).encode()
    raw += b' ' * (-len(raw) % 8)   # the data starts 8-byte aligned
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(raw)))
        f.write(raw)
        for spec in specs:
            remaining = spec.nbytes
            while remaining:
                chunk = next(chunks)
                if chunk.dtype != spec.dtype:
                    raise ValueError(f'{spec.name}: got {chunk.dtype}, expected {spec.dtype}')
                data = chunk.detach().contiguous().cpu().numpy()
                if data.nbytes > remaining:
                    raise ValueError(f'{spec.name}: more data than its shape {spec.shape}')
                f.write(memoryview(data).cast('B'))
                remaining -= data.nbytes


def shard(plan: Sequence[TensorSpec], shard_bytes: int = SHARD_BYTES) -> List[List[TensorSpec]]:
    """Split a plan, in order, into shards of at most shard_bytes (or one tensor each)."""
    shards: List[List[TensorSpec]] = [[]]
    size = 0
    for spec in plan:
        if shards[-1] and size + spec.nbytes > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(spec)
        size += spec.nbytes
    return shards


def write_checkpoint(out: Path, plan: Sequence[TensorSpec], chunks: Iterator[torch.Tensor],
                     shard_bytes: int = SHARD_BYTES) -> None:
    """Write a plan's tensors as model.safetensors or numbered shards plus their index."""
    parts = shard(plan, shard_bytes)
    names = (['model.safetensors'] if len(parts) == 1 else
             [f'model-{i + 1:05d}-of-{len(parts):05d}.safetensors' for i in range(len(parts))])
    weight_map = {}
    for name, specs in zip(names, parts):
        write_safetensors(out / name, specs, chunks)
        weight_map.update({spec.name: name for spec in specs})
    if next(chunks, None) is not None:
        raise ValueError('more tensor data than the checkpoint plan holds')
    if len(parts) > 1:
        index = {'metadata': {'total_size': sum(s.nbytes for s in plan)}, 'weight_map': weight_map}
        (out / 'model.safetensors.index.json').write_text(json.dumps(index, indent=2))


def _copied_type(hf: dict) -> str:
    # The model_type of a checkpoint we can write a GPTQ copy of (gemma3's multimodal one has
    # its language model under other names: not yet).
    model_type = hf.get('model_type', 'llama')
    if model_type not in ARCHITECTURES:
        raise ValueError(f'GPTQ copies are made of {", ".join(ARCHITECTURES)} checkpoints, '
                         f'not {model_type}')
    return model_type


def gptq_config(hf: dict, spec: GptqSpec) -> dict:
    """
    config.json of the quantised model: the source's, in keys exllamav2 0.3.2 reads.

    RoPE settings nested per layer type (Gemma 3's, transformers 5) stay as they are: flat
    keys cannot say them, and our loader and transformers read both.
    """
    model_type = _copied_type(hf)
    per_layer_type = 'full_attention' in (hf.get('rope_parameters') or {})
    skip = ('dtype', 'torch_dtype', 'quantization_config') + (
        () if per_layer_type else ('rope_parameters', 'rope_scaling'))
    config = {key: value for key, value in hf.items() if key not in skip}
    if not per_layer_type:
        rope = dict(hf.get('rope_parameters') or hf.get('rope_scaling') or {})
        config['rope_theta'] = float(rope.pop('rope_theta', hf.get('rope_theta', 10000.0)))
        rope_type = rope.get('rope_type', rope.get('type', 'default'))
        config['rope_scaling'] = rope if rope_type != 'default' else None
    config['architectures'] = [ARCHITECTURES[model_type]]
    config['torch_dtype'] = 'float16'
    config['quantization_config'] = spec.quantization_config()
    return config


def _write_configs(out: Path, hf: dict, spec: GptqSpec) -> None:
    (out / 'config.json').write_text(json.dumps(gptq_config(hf, spec), indent=2))
    (out / 'quantize_config.json').write_text(json.dumps(spec.quantization_config(), indent=2))


def synthetic_chunks(plan: Sequence[TensorSpec], seed: int,
                     device: torch.device) -> Iterator[torch.Tensor]:
    """Random tensors for a plan: uniform 4-bit codes, zero 8, scales near SYNTHETIC_SCALE."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    for spec in plan:
        if spec.name.endswith('.qweight'):
            # Every bit pattern is eight uniform codes.
            yield torch.randint(-2 ** 31, 2 ** 31, spec.shape, dtype=torch.int32,
                                generator=gen, device=device)
        elif spec.name.endswith('.qzeros'):
            yield torch.full(spec.shape, 0x77777777, dtype=torch.int32, device=device)
        elif spec.name.endswith('.scales'):
            scales = torch.empty(spec.shape, device=device).uniform_(0.8, 1.2, generator=gen)
            yield (scales * SYNTHETIC_SCALE).half()
        elif spec.name.endswith('norm.weight'):
            yield torch.ones(spec.shape, dtype=torch.float16, device=device)
        else:   # embeddings, lm_head, biases (non-zero: exllamav2 drops all-zero biases)
            for start in range(0, spec.shape[0], ROWS_PER_CHUNK):
                rows = (min(ROWS_PER_CHUNK, spec.shape[0] - start),) + spec.shape[1:]
                yield torch.empty(rows, device=device).normal_(0.0, 0.02, generator=gen).half()


def write_synthetic(hf: dict, out: Path, seed: int = 0,
                    device: Optional[torch.device] = None,
                    shard_bytes: int = SHARD_BYTES) -> GptqSpec:
    """
    Write a random GPTQ checkpoint of the shape in hf (a config.json dict) into out.

    Random numbers are drawn on device (CUDA when present: several times faster for an 8B).
    Returns the spec used (group size 128 where the shape allows it).
    """
    config = ModelConfig.from_hf(hf)
    spec = GptqSpec(pick_group_size(config))
    device = device or torch.device('cuda' if torch.cuda.is_available() else 'cpu')
    out.mkdir(parents=True, exist_ok=True)
    plan = checkpoint_plan(config, spec)
    write_checkpoint(out, plan, synthetic_chunks(plan, seed, device), shard_bytes)
    _write_configs(out, hf, spec)
    eos = {key: hf[key] for key in ('bos_token_id', 'eos_token_id') if key in hf}
    (out / 'generation_config.json').write_text(json.dumps(eos, indent=2))
    return spec


class _FloatTensors:
    """Read tensors by name from a directory of safetensors files, one at a time."""

    def __init__(self, folder: Path):
        from safetensors import safe_open
        self._files = {}
        for file in sorted(folder.glob('*.safetensors')):
            handle = safe_open(str(file), framework='pt', device='cpu')
            self._files.update({name: handle for name in handle.keys()})
        if not self._files:
            raise FileNotFoundError(f'{folder} holds no *.safetensors weights')

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self._files:
            raise KeyError(f'{name} is missing from the source checkpoint')
        return self._files[name].get_tensor(name)


def quantized_chunks(source: _FloatTensors, plan: Sequence[TensorSpec],
                     spec: GptqSpec) -> Iterator[torch.Tensor]:
    """Yield the plan's tensors from a float checkpoint: linears by RTN, the rest as fp16."""
    pending: Dict[str, torch.Tensor] = {}
    for item in plan:
        if item.name in pending:
            yield pending.pop(item.name)
        elif item.name.endswith('.qweight'):
            prefix = item.name[:-len('.qweight')]
            q = quantize(source[prefix + '.weight'], spec.group_size)
            pending.update({prefix + '.qzeros': q['qzeros'], prefix + '.scales': q['scales']})
            yield q['qweight']
        else:
            yield source[item.name].half()


def quantize_hf_dir(src: Path, out: Path, spec: Optional[GptqSpec] = None,
                    shard_bytes: int = SHARD_BYTES, hf: Optional[dict] = None) -> GptqSpec:
    """
    Quantise a float Hugging Face directory into a GPTQ one (round-to-nearest, symmetric).

    hf is src's parsed config.json (read here when not given). The tokenizer, chat template
    and generation config are copied along, so the quantised directory serves text like its
    source. Returns the spec used.
    """
    src = Path(src)
    if hf is None:
        hf = read_config(src / 'config.json')
    if hf.get('quantization_config'):
        raise ValueError(f'{src} is already quantised '
                         f'({hf["quantization_config"].get("quant_method")})')
    _copied_type(hf)
    config = ModelConfig.from_hf(hf)
    spec = spec or GptqSpec(pick_group_size(config))
    out.mkdir(parents=True, exist_ok=True)
    plan = checkpoint_plan(config, spec)
    write_checkpoint(out, plan, quantized_chunks(_FloatTensors(src), plan, spec), shard_bytes)
    _write_configs(out, hf, spec)
    for file in src.iterdir():
        if file.is_file() and file.name not in WRITTEN_HERE \
                and not file.name.endswith(WEIGHT_FILES + ('.index.json',)):
            shutil.copy2(file, out / file.name)
    return spec
