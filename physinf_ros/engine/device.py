"""Device and dtype choice: CUDA bf16 when a GPU is there, CPU float32 otherwise."""

import torch

from .base import EngineError

DTYPES = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}


def pick_device(name: str = 'auto') -> torch.device:
    """Resolve 'auto', 'cpu', 'cuda' or 'cuda:N' to a usable torch device."""
    name = (name or 'auto').strip().lower()
    if name == 'auto':
        return torch.device('cuda' if torch.cuda.is_available() else 'cpu')
    try:
        device = torch.device(name)
    except RuntimeError:
        raise EngineError(f'unknown device {name!r}: use auto, cpu, cuda or cuda:N') from None
    if device.type == 'cuda':
        if not torch.cuda.is_available():
            raise EngineError(f'device {name!r} asked for, but torch {torch.__version__} sees no '
                              'CUDA GPU: install a CUDA build of torch or use device cpu')
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise EngineError(f'device {name!r} asked for, but only '
                              f'{torch.cuda.device_count()} CUDA device(s) exist')
    elif device.type != 'cpu':
        raise EngineError(f'device type {device.type!r} is not supported: use cpu or cuda')
    return device


def pick_dtype(name: str, device: torch.device) -> torch.dtype:
    """Resolve 'auto' (bf16 on CUDA, float32 on CPU) or an explicit dtype name."""
    name = (name or 'auto').strip().lower()
    if name == 'auto':
        return torch.bfloat16 if device.type == 'cuda' else torch.float32
    if name not in DTYPES:
        raise EngineError(f'unknown dtype {name!r}: use auto, {", ".join(DTYPES)}')
    return DTYPES[name]


def device_index(device: torch.device) -> int:
    """Return the index of a CUDA device ('cuda' alone: the current one)."""
    return device.index if device.index is not None else torch.cuda.current_device()


def device_label(device: torch.device) -> str:
    """'cpu' or 'cuda:0 (NVIDIA H200)'."""
    if device.type != 'cuda':
        return 'cpu'
    index = device_index(device)
    return f'cuda:{index} ({torch.cuda.get_device_name(index)})'


def dtype_name(dtype: torch.dtype) -> str:
    """'bfloat16' for torch.bfloat16."""
    return str(dtype).replace('torch.', '')


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work, so host clocks time real work."""
    if device.type == 'cuda':
        torch.cuda.synchronize(device)
