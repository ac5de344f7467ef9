"""The Llama-family model: its config and tensor names (config.py), its forward (llama.py)."""
