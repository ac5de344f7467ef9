"""
Summarise a paired run (`benchmarks/run_device.sh paired`): this tree against a base, per cell.

The stage writes one protocol file per arm, round and model: `{new,base}{round}_{tag}.json`.
Session slot s of round r is paired across the arms (the same place in the interleaving, so drift
on the machine touches both alike). Per model and context this prints each arm's mean of its
session medians, the difference, new / base with its bootstrap interval over the session pairs, and
the interval that counts: over the rounds. The sessions of one arm in one round run in one process
and share its level, and levels differ by up to 3% between processes of the same code
(docs/PERF.md, measured with v23, commit dad47d5), so a round is one independent pair, not three:
new / base of each round's mean session medians, with a Student-t interval over the rounds:

    python3 benchmarks/paired_summary.py benchmarks/results/h200/paired_s7
"""

import argparse
from collections import defaultdict
import json
from pathlib import Path
import re
from statistics import mean

from physinf_ros.measurement.stats import bootstrap_ratio_ci, ratio_t_ci

FILE = re.compile(r'(new|base)(\d+)_(.+)\.json')


def session_medians(folder: Path) -> dict:
    """{(tag, ctx): {arm: {(round, slot): session median ms}}} from a paired run's files."""
    cells = defaultdict(lambda: defaultdict(dict))
    for path in sorted(folder.glob('*.json')):
        match = FILE.fullmatch(path.name)
        if not match:
            continue
        arm, round_, tag = match.groups()
        for cell in json.loads(path.read_text())['cells']:
            for slot, median in enumerate(cell['session_median_ms']):
                cells[(tag, cell['ctx'])][arm][(int(round_), slot)] = median
    return cells


def summarise(folder: Path) -> list:
    """One row per (model tag, ctx): both arms' means, new - base, new / base with its CIs."""
    rows = []
    for (tag, ctx), arms in sorted(session_medians(folder).items()):
        slots = sorted(set(arms['new']) & set(arms['base']))
        new = [arms['new'][s] for s in slots]
        base = [arms['base'][s] for s in slots]
        ratio, low, high = bootstrap_ratio_ci(new, base)
        rounds = sorted({r for r, _ in slots})
        by_round = [mean([arms['new'][s] for s in slots if s[0] == r])
                    / mean([arms['base'][s] for s in slots if s[0] == r]) for r in rounds]
        round_ci = list(ratio_t_ci(by_round)[1:]) if len(rounds) > 1 else None
        rows.append({'model': tag, 'ctx': ctx, 'pairs': len(slots),
                     'base_ms': mean(base), 'new_ms': mean(new),
                     'ratio': ratio, 'ratio_ci95': [low, high],
                     'rounds': len(rounds), 'round_ratios': by_round,
                     'round_ratio_ci95': round_ci})
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('folder', type=Path, help="the paired run's files")
    parser.add_argument('--json', action='store_true', help='print the rows as JSON')
    args = parser.parse_args(argv)
    rows = summarise(args.folder)
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print('| model | ctx | pairs | base ms | new ms | new - base | new / base [95% CI], '
          'session pairs | rounds | by round [95% CI] |')
    print('|---|---|---|---|---|---|---|---|---|')
    for r in rows:
        low, high = r['ratio_ci95']
        by_round = (f"[{r['round_ratio_ci95'][0]:.3f}, {r['round_ratio_ci95'][1]:.3f}]"
                    if r['round_ratio_ci95'] else '- (one round)')
        print(f"| {r['model']} | {r['ctx']} | {r['pairs']} | {r['base_ms']:.3f} | "
              f"{r['new_ms']:.3f} | {r['new_ms'] - r['base_ms']:+.3f} | "
              f"{r['ratio']:.3f} [{low:.3f}, {high:.3f}] | {r['rounds']} | {by_round} |")


if __name__ == '__main__':
    main()
