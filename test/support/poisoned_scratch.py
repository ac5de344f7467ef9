"""Scratch memory filled with NaN, so that a kernel's output left unwritten shows in a test."""

import torch


def poison_scratch(patch):
    """Make torch.empty and empty_like fill floating tensors with NaN (patch: monkeypatch)."""
    for name in ('empty', 'empty_like'):
        make = getattr(torch, name)

        def make_poisoned(*args, make=make, **kwargs):
            t = make(*args, **kwargs)
            return t.fill_(float('nan')) if t.is_floating_point() else t

        patch.setattr(torch, name, make_poisoned)
