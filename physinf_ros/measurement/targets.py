"""
Compute targets: the datasheet bandwidth of known GPUs, and a measured one for anything else.

config/targets.yaml lists the GPUs (B_peak, memory, optional hourly price with its source and
date). The running GPU is found by the exact name torch reports; an unknown GPU, or the CPU,
gets the bandwidth of a large device copy (bytes read plus bytes written, per second), flagged
`measured` so no result passes it off as a datasheet figure.
"""

from dataclasses import dataclass, replace
import platform
import time
from typing import Callable, Dict, Optional

import torch

from ..resources import config_path

PRICE_FIELDS = ('price_per_hour', 'price_source', 'price_date')


@dataclass(frozen=True)
class Target:
    """A compute target and its peak memory bandwidth in GB/s (1e9 bytes/s)."""

    key: str
    name: str
    bandwidth_gbs: float
    bandwidth_source: str
    measured: bool = False
    memory_gb: Optional[float] = None
    price_per_hour: Optional[float] = None
    price_source: Optional[str] = None
    price_date: Optional[str] = None
    aliases: tuple = ()
    bf16_dense_tflops: Optional[float] = None   # dense bf16 tensor peak; None where unknown
    compute_source: Optional[str] = None

    def with_price(self, price_per_hour: float, source: str, date: str) -> 'Target':
        """Return this target with another hourly price (e.g. from the command line)."""
        return replace(self, price_per_hour=float(price_per_hour), price_source=source,
                       price_date=date)

    def facts(self) -> dict:
        """Plain dict for results files."""
        return {'key': self.key, 'name': self.name, 'B_peak_gbs': self.bandwidth_gbs,
                'bandwidth_source': self.bandwidth_source, 'measured': self.measured,
                'memory_gb': self.memory_gb, 'price_per_hour': self.price_per_hour,
                'price_source': self.price_source, 'price_date': self.price_date,
                'bf16_dense_tflops': self.bf16_dense_tflops,
                'compute_source': self.compute_source}


def load_targets(text: Optional[str] = None) -> Dict[str, Target]:
    """Read config/targets.yaml (or the given YAML text); a price needs a source and a date."""
    import yaml
    data = yaml.safe_load(text if text is not None else
                          config_path('targets.yaml').read_text())
    targets = {}
    for key, entry in data.items():
        price = [entry.get(f) for f in PRICE_FIELDS]
        if price[0] is not None and not all(price):
            raise ValueError(f'targets.yaml: {key} has a price without price_source and '
                             'price_date; give both or leave the price null')
        targets[key] = Target(
            key=key, name=entry['name'], bandwidth_gbs=float(entry['bandwidth_gbs']),
            bandwidth_source=entry['bandwidth_source'], memory_gb=entry.get('memory_gb'),
            price_per_hour=None if price[0] is None else float(price[0]),
            price_source=price[1], price_date=None if price[2] is None else str(price[2]),
            aliases=tuple(entry.get('aliases') or ()),
            bf16_dense_tflops=None if entry.get('bf16_dense_tflops') is None
            else float(entry['bf16_dense_tflops']),
            compute_source=entry.get('compute_source'))
    return targets


def match(device_name: str, targets: Dict[str, Target]) -> Optional[Target]:
    """Return the target whose alias is exactly device_name (case-insensitive), if any."""
    wanted = device_name.strip().lower()
    return next((t for t in targets.values()
                 if any(alias.lower() == wanted for alias in t.aliases)), None)


def device_name(device: torch.device) -> str:
    """Return the GPU's name as torch reports it, or the CPU's model name."""
    if device.type == 'cuda':
        return torch.cuda.get_device_name(device)
    try:
        with open('/proc/cpuinfo') as cpuinfo:
            for line in cpuinfo:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or 'CPU'


def measure_copy_bandwidth(device: torch.device, repeats: int = 10) -> float:
    """
    Return GB/s of a large tensor copy on device, counting bytes read plus bytes written.

    The best of several copies: a peak, as a datasheet gives one. On the CPU the buffers are
    small enough (64 MiB) for the measurement to take well under a second.
    """
    if device.type == 'cuda':
        free, _ = torch.cuda.mem_get_info(device)
        size = min(1 << 30, free // 8)
    else:
        size = 64 << 20
    src = torch.empty(size, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    dst.copy_(src)  # first touch: page faults and allocator work stay out of the timing
    best = float('inf')
    for _ in range(repeats):
        if device.type == 'cuda':
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        dst.copy_(src)
        if device.type == 'cuda':
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - start)
    return 2 * size / best / 1e9


def detect(device: torch.device, key: str = '',
           log: Callable[[str], None] = lambda _: None) -> Target:
    """
    Return the target for device: the key given, else the table entry named like the GPU.

    Anything else is measured. A key that is not in the table is an error naming the choices.
    """
    targets = load_targets()
    if key:
        if key not in targets:
            raise ValueError(f'unknown target {key!r}: choose one of {", ".join(targets)}')
        return targets[key]
    name = device_name(device)
    found = match(name, targets) if device.type == 'cuda' else None
    if found is not None:
        log(f'target {found.key}: {name}, datasheet B_peak {found.bandwidth_gbs:g} GB/s')
        return found
    bandwidth = measure_copy_bandwidth(device)
    log(f'{name} is not in targets.yaml: measured copy bandwidth {bandwidth:.1f} GB/s '
        '(read + write) stands in for B_peak')
    return Target(key='measured-' + device.type, name=name, bandwidth_gbs=round(bandwidth, 1),
                  bandwidth_source='measured: device copy, bytes read + written, best of 10',
                  measured=True)
