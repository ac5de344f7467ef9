"""
Session 21: the protocol's sessions, two decoder classes in one process on the same weights.

The paired stage runs each arm in its own processes, and the 8B's process medians spread by
up to 0.12 ms between processes of the same code (run 1): four processes an arm cannot resolve a
few hundredths of a ms. Here the tree's NativeDecoder and a base's take turns in one process
(BASE: HEAD's native.py, or since session 22 a folder with a copy of the whole package, its
physinf_ros/ and config/, imported as a package of its own): each session is the protocol's (a
fresh decoder on the loaded weights, a prefill of ctx random tokens, 5 warm-up steps, 30
measured decoder.step() timed with time.perf_counter, gc off), the arms alternating A B / B A
over SESSIONS pairs. Prints per cell each arm's median of session medians, new / base with a
bootstrap interval over the pairs, and the median step by step index over the sessions (the
within-session trend).
Usage: [BASE_CONFIG=own] inproc.py BASE CTX[,CTX] ARCH...
BASE may also be `flags:NAME=VALUE[ NAME=VALUE]` (session 31; a NAME of KIND:N:K sets that
GEMV's launch shape, VALUE BLOCK_N,BLOCK_K,SPLIT_K,WARPS[,AHEAD]): the base arm is the tree's own
decoder with those KernelConfig.with_flag switches, an A/B of settings that also takes the
4-bit models (a base package's PackedLinear is not the tree's, so it cannot run them);
NEW_FLAGS='NAME=VALUE ...' sets switches on the new arm's decoder the same way.
"""
import gc
import importlib
import importlib.util
import os
import statistics
import sys

from physinf_ros.bench.protocol import Plan, prompt_ids, timed_session
from physinf_ros.engine.loading import load
from physinf_ros.measurement.stats import bootstrap_ratio_ci
import torch

SESSIONS = 10
# BASE_CONFIG=own: the base decoder takes its own config/kernels.yaml (an A/B of launch shapes
# and switches); by default both arms take the tree's, and only the code differs.
OWN_CONFIG = os.environ.get('BASE_CONFIG') == 'own'


def base_module(path: str, name: str):
    """Return module NAME (engine.native, ...) of a copy of the whole package at path."""
    if 'physinf_ros_base' not in sys.modules:   # imported as a package of its own
        init = os.path.join(path, 'physinf_ros', '__init__.py')
        spec = importlib.util.spec_from_file_location(
            'physinf_ros_base', init, submodule_search_locations=[os.path.dirname(init)])
        sys.modules['physinf_ros_base'] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules['physinf_ros_base'])
    return importlib.import_module('physinf_ros_base.' + name)


def flagged(flags: str):
    """Return a maker of the tree's decoder whose kernel configuration has flags set."""
    from physinf_ros.engine.kernels import GemvConfig
    from physinf_ros.engine.native import NativeDecoder

    def make(weights, info, device, graphed, kernel_config):
        for flag in flags.split(' '):
            name, _, value = flag.partition('=')
            if name.count(':') == 2:   # KIND:N:K=BLOCK_N,BLOCK_K,SPLIT_K,WARPS[,AHEAD]
                kind, n, k = name.split(':')
                kernel_config = kernel_config.with_gemv(
                    kind, int(n), int(k), GemvConfig(*map(int, value.split(','))))
            else:
                kernel_config = kernel_config.with_flag(name, value)
        return NativeDecoder(weights, info, device, graphed=graphed, kernel_config=kernel_config)
    return make


def base_class(path: str):
    if path.startswith('flags:'):
        return flagged(path[len('flags:'):])
    if os.path.isdir(path):   # a copy of the whole package (session 22)
        return base_module(path, 'engine.native').NativeDecoder
    # HEAD's native.py as a module of the package, so its relative imports resolve.
    spec = importlib.util.spec_from_file_location('physinf_ros.engine.native_base', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.NativeDecoder


def session(engine, cls, plan: Plan, ctx: int, slot: int):
    engine.renew('graphed', max_context=plan.max_context(ctx))
    if cls is not None:   # the same fresh decoder, of the base class
        d = engine.decoder
        weights, info, device, config = d.weights, d.info, d.device, d.ops.config
        engine.decoder = d = None
        gc.collect()
        if OWN_CONFIG:   # the base's own kernels.yaml, not the tree's
            config = None
        engine.decoder = cls(weights, info, device, graphed=True, kernel_config=config)
    ids = prompt_ids(engine.source.hf_config['vocab_size'], ctx, plan.seed, slot)
    return timed_session(engine.decoder, ids, plan)[1]   # the protocol's session: step times


def main(base: str, contexts, archs) -> None:
    print(torch.cuda.get_device_name(), flush=True)
    base_cls = base_class(base)
    new_flags = os.environ.get('NEW_FLAGS')
    new_cls = flagged(new_flags) if new_flags else None   # None: the engine's own decoder
    plan = Plan()
    for arch in archs:
        engine = load(f'synthetic:{arch}', 'graphed', max_context=plan.max_context(max(contexts)))
        for ctx in contexts:
            runs = {'new': [], 'base': []}
            for slot in range(SESSIONS):
                order = ('new', 'base') if slot % 2 == 0 else ('base', 'new')
                for arm in order:
                    cls = base_cls if arm == 'base' else new_cls
                    runs[arm].append(session(engine, cls, plan, ctx, slot))
            medians = {arm: [statistics.median(s) for s in runs[arm]] for arm in runs}
            ratio, low, high = bootstrap_ratio_ci(medians['new'], medians['base'])
            print(f'{arch} ctx {ctx}: base {statistics.median(medians["base"]):.3f} ms, '
                  f'new {statistics.median(medians["new"]):.3f} ms, new / base {ratio:.3f} '
                  f'[{low:.3f}, {high:.3f}] ({SESSIONS} pairs)', flush=True)
            for arm in runs:
                by_index = [statistics.median(s[i] for s in runs[arm]) for i in range(plan.steps)]
                print(f'  {arm} by step: ' + ' '.join(f'{ms:.3f}' for ms in by_index[::3]),
                      flush=True)
        engine.close()


if __name__ == '__main__':
    main(sys.argv[1], [int(c) for c in sys.argv[2].split(',')], sys.argv[3:])
