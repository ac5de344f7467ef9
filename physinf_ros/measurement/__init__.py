"""
What the measurements are made of, free of rclpy: the memory floor, the targets, the statistics.

roofline.py prices one batch-1 decode step in bytes (W, W_all, K) and turns it into t_floor,
R_floor, tokens/s and cost per token; targets.py holds the compute targets (config/targets.yaml,
the GPU found by name, a measured bandwidth for anything else); stats.py has the percentiles,
latency windows and bootstrap confidence intervals that the nodes and the benchmark report.
"""
