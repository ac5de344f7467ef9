"""
ROS-free decoding engine: model loading, backends, sampling and the generation loop.

This module is the engine's face: load() and Engine (loading.py), the backend table
(backends.py), Sampling and the errors (base.py), the model-spec grammar (models.py) and the
generation loop (generate.py). The rest of the package imports these names from here.
"""

from .backends import BACKEND_HELP, BACKENDS, check_name as check_backend, pick as pick_backend
from .base import ContextFull, Decoder, DecoderInfo, EngineError, Sampling
from .generate import Generation
from .loading import Engine, load
from .models import EMBEDDED, MODEL_SPEC_HELP

__all__ = ['BACKEND_HELP', 'BACKENDS', 'check_backend', 'ContextFull', 'Decoder', 'DecoderInfo',
           'EMBEDDED', 'Engine', 'EngineError', 'Generation', 'MODEL_SPEC_HELP', 'pick_backend',
           'Sampling', 'load']
