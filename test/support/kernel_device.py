"""
The device the kernel tests run on: the GPU where there is one, else the CPU.

On the CPU the Triton kernels run in Triton's interpreter (conftest.py turns it on where no GPU
is); on a GPU machine they compile and run natively, and take only CUDA tensors.
"""

import torch

DEVICE = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
