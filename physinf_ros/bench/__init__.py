"""
ROS-free benchmark: the paper's protocol, results files and the report.

protocol.py measures cells of fresh sessions; benchmark.py adds the target and the roofline and
makes results records; results.py writes and reads the versioned JSON + CSV; params.py is the
benchmark node's parameter table; cli.py is physinf-bench; report.py is physinf-report
(report.md and the plots).
"""

from .benchmark import BenchListener, Benchmark
from .protocol import Plan

__all__ = ['BenchListener', 'Benchmark', 'Plan']
