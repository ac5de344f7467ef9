"""
The decode step's operations: PyTorch (ops_torch.py), Triton (ops_triton.py) and CUDA.

config.py's KernelConfig says which kernel runs with which launch shape (shapes.py); the CUDA
kernels (attention_split.cu, q4_gemv.cu) are built at first use by cuda_library.py and called
through attention_cuda.py and q4_cuda.py. Importing this package imports no Triton: only
ops_triton.py does.
"""
