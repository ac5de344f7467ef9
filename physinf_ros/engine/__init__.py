"""
ROS-free decoding engine: model loading, backends, sampling and the generation loop.

This module is the engine's face: load() and Engine (loading.py), the backend table
(decoders/backends.py), Sampling and the errors (base.py), the model-spec grammar
(weights/resolve.py) and the generation loop (generate.py). The rest of the package imports
these names from here.

Layout: base.py (the Decoder protocol, Sampling, the errors), device.py, sampling.py and text.py
are the core the parts share; model/ holds the config and one forward a family; weights/ turns a
model spec into a directory and writes GPTQ copies; kernels/ holds the decode step's ops in
PyTorch, Triton and CUDA; decoders/ the backends. generate.py is the generation loop, and
loading.py puts a model, a backend and a tokenizer together. No import circle
(test/test_import_graph.py).
"""

from .base import ContextFull, Decoder, DecoderInfo, EngineError, Sampling
from .decoders.backends import (BACKEND_HELP, BACKENDS, check_name as check_backend,
                                pick as pick_backend)
from .generate import Generation
from .loading import Engine, load
from .weights.resolve import EMBEDDED, MODEL_SPEC_HELP

__all__ = ['BACKEND_HELP', 'BACKENDS', 'check_backend', 'ContextFull', 'Decoder', 'DecoderInfo',
           'EMBEDDED', 'Engine', 'EngineError', 'Generation', 'MODEL_SPEC_HELP', 'pick_backend',
           'Sampling', 'load']
