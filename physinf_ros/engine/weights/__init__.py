"""
Where weights come from and how they are stored.

resolve.py turns a model spec into a directory (source.py's ModelSource), converting GGUF files
and writing GPTQ copies (gptq_files.py) once into the cache; gptq.py is the 4-bit GPTQ layout
and PackedLinear, the form our kernels read.
"""
