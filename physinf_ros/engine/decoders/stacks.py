"""
The software stacks a transformers backend runs with, one record each (the paper's matrix).

A backend takes at most one stack after a colon: `hf-graphed:sdpa-cudnn`, `hf:bnb-nf4`.
Attention stacks pick transformers' `attn_implementation` and, for SDPA, the kernel torch's
SDPA dispatcher must use (`torch.nn.attention.sdpa_kernel`); they share the loaded weights.
Quantisation stacks replace the linears of the loaded model with a package's quantised ones;
each holds its own weights. Every stack's package is optional: `missing` says what to install
before any weights load.
"""

from contextlib import nullcontext
from dataclasses import dataclass
from importlib.util import find_spec
from typing import Callable, Optional

import torch


@dataclass(frozen=True)
class Attention:
    """An attention implementation of the transformers forward."""

    name: str
    implementation: str            # transformers' attn_implementation
    sdpa_backend: Optional[str]    # torch.nn.attention.SDPBackend member forced, or None
    summary: str
    package: Optional[str] = None  # import name it needs beyond torch and transformers
    install: str = ''
    needs_cuda: bool = False

    def context(self):
        """Return the context manager the forward runs in (SDPA's kernel forced, or none)."""
        if self.sdpa_backend is None:
            return nullcontext()
        from torch.nn.attention import sdpa_kernel, SDPBackend
        return sdpa_kernel(getattr(SDPBackend, self.sdpa_backend))


@dataclass(frozen=True)
class WeightFormat:
    """
    How a quantisation stack stores a linear [N, K]: bits per weight and per-group extras.

    bytes = N K bits / 8 + (N K / group) group_bytes + N row_bytes. Everything else (norms,
    embeddings, the head) stays in the model dtype, as the stacks leave it.
    """

    bits: float
    group: int = 0           # inputs per group (0: no groups)
    group_bytes: float = 0.0
    row_bytes: float = 0.0

    def linear_bytes(self, rows: int, cols: int) -> float:
        groups = rows * cols / self.group if self.group else 0
        return rows * cols * self.bits / 8 + groups * self.group_bytes + rows * self.row_bytes


@dataclass(frozen=True)
class Quantization:
    """A weight quantisation stack applied to the loaded transformers model."""

    name: str
    package: str           # import name
    install: str
    summary: str
    weight_format: WeightFormat
    quantize: Callable     # (model, dtype) -> None, in place, on the model's CUDA device
    compiled_step: bool = False   # torch.compile the one-token forward, as the package says
    needs_cuda: bool = True


def _bnb_nf4(model, dtype: torch.dtype) -> None:
    # What transformers' BitsAndBytesConfig(load_in_4bit, nf4, no double quantisation) does, on
    # weights already in GPU memory: every linear but the head becomes a Linear4bit, its
    # weight quantised where it lies.
    import bitsandbytes as bnb
    for parent, name, linear in _decoder_linears(model):
        quantized = bnb.nn.Linear4bit(linear.in_features, linear.out_features, bias=False,
                                      compute_dtype=dtype, compress_statistics=False,
                                      quant_type='nf4', device='meta')
        quantized.weight = bnb.nn.Params4bit(
            linear.weight.data, requires_grad=False, quant_type='nf4',
            compress_statistics=False, module=quantized).to(linear.weight.device)
        quantized.bias = linear.bias
        setattr(parent, name, quantized)


def _torchao(config_name: str, **kwargs) -> Callable:
    def quantize(model, dtype: torch.dtype) -> None:
        import torchao.quantization as quantization
        config = getattr(quantization, config_name)(**kwargs)
        quantization.quantize_(model.model, config)   # the decoder layers; the head stays
    return quantize


def _decoder_linears(model):
    # Listed before any is replaced: a Linear4bit is a Linear too.
    return [(parent, name, child) for parent in model.model.modules()
            for name, child in parent.named_children() if isinstance(child, torch.nn.Linear)]


ATTENTIONS = (
    Attention('sdpa', 'sdpa', None, "torch SDPA, its own kernel choice (transformers' default)"),
    Attention('sdpa-math', 'sdpa', 'MATH', 'torch SDPA forced to its math (unfused) kernel'),
    Attention('sdpa-efficient', 'sdpa', 'EFFICIENT_ATTENTION',
              'torch SDPA forced to its memory-efficient kernel', needs_cuda=True),
    Attention('sdpa-flash', 'sdpa', 'FLASH_ATTENTION',
              'torch SDPA forced to its FlashAttention-2 kernel', needs_cuda=True),
    Attention('sdpa-cudnn', 'sdpa', 'CUDNN_ATTENTION', 'torch SDPA forced to cuDNN attention',
              needs_cuda=True),
    Attention('eager', 'eager', None, "transformers' own matmul-softmax-matmul"),
    Attention('flex_attention', 'flex_attention', None,
              'torch FlexAttention (compiled by transformers)'),
    Attention('flash_attention_2', 'flash_attention_2', None, 'FlashAttention-2 (flash-attn)',
              package='flash_attn', install='pip install flash-attn --no-build-isolation',
              needs_cuda=True),
    Attention('flash_attention_3', 'flash_attention_3', None, 'FlashAttention-3 (Hopper)',
              package='flash_attn_interface',
              install='build flash-attn/hopper from source (github.com/Dao-AILab/flash-attention)',
              needs_cuda=True),
)

QUANTIZATIONS = (
    # NF4 codes in blocks of 64 with one fp32 absmax each (no double quantisation).
    Quantization('bnb-nf4', 'bitsandbytes', 'pip install bitsandbytes',
                 'bitsandbytes NF4, blocks of 64', WeightFormat(4, 64, 4.0), _bnb_nf4),
    # int4 codes, groups of 128 with a bf16 scale and zero each, tinygemm's tiled layout.
    Quantization('torchao-int4', 'torchao', 'pip install torchao',
                 'torchao int4 weight-only, group 128 (tinygemm)', WeightFormat(4, 128, 4.0),
                 _torchao('Int4WeightOnlyConfig', group_size=128,
                          int4_packing_format='tile_packed_to_4d',
                          int4_choose_qparams_algorithm='tinygemm'),
                 compiled_step=True),
    # int8 codes with one bf16 scale per output row.
    Quantization('torchao-int8', 'torchao', 'pip install torchao',
                 'torchao int8 weight-only, per-row scales', WeightFormat(8, 0, 0.0, 2.0),
                 _torchao('Int8WeightOnlyConfig'), compiled_step=True),
)


@dataclass(frozen=True)
class Unsupported:
    """A stack of the paper's matrix that no maintained package brings to this torch."""

    name: str
    summary: str
    reason: str
    needs_cuda: bool = True
    package: Optional[str] = None


UNSUPPORTED = (
    Unsupported('awq-marlin', 'AutoAWQ 4-bit weights on Marlin kernels',
                'stack awq-marlin does not install with torch 2.11: AutoAWQ is deprecated by '
                'its authors (last tested with torch 2.6 and transformers 4.51) and its '
                'kernels (autoawq-kernels 0.0.9) are built against torch 2.5.1, while '
                "GPTQModel, Marlin's maintained home, has no wheel on PyPI; measure it where "
                'one of them installs'),
)

STACKS = {s.name: s for s in ATTENTIONS + QUANTIZATIONS + UNSUPPORTED}
STACK_HELP = ('attention: ' + ', '.join(a.name for a in ATTENTIONS) + '; quantisation: '
              + ', '.join(q.name for q in QUANTIZATIONS + UNSUPPORTED))


def missing(stack, device: torch.device) -> Optional[str]:
    """Why stack cannot run here (not supported, its package not installed, no CUDA), or None."""
    if isinstance(stack, Unsupported):
        return stack.reason
    if stack.needs_cuda and device.type != 'cuda':
        return f'stack {stack.name} needs a CUDA GPU (device is {device.type})'
    if stack.package and find_spec(stack.package) is None:
        return f'stack {stack.name} needs the {stack.package} package: {stack.install}'
    return None
