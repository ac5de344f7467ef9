#!/usr/bin/env bash
# Start decoder_node on the embedded model, send it one prompt with prompt_client, print the
# streamed reply and the decoder's diagnostics, then stop the node with Ctrl-C (SIGINT).
# PROMPT replaces the prompt; FOLLOW_UP adds a second turn of the same conversation.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. .venv/bin/activate
# The interface package (the Generate action), where setup could build it. Only its own
# environment: install/ may also hold a copy of physinf_ros from make test, which must not
# shadow the working tree that .venv runs.
iface_env=install/physinf_ros_interfaces/share/physinf_ros_interfaces/package.bash
if [ -f "$iface_env" ]; then set +u; . "$iface_env"; set -u; fi
export ROS_DOMAIN_ID=${ROS_DOMAIN_ID:-$(( 100 + RANDOM % 100 ))}
export ROS_AUTOMATIC_DISCOVERY_RANGE=${ROS_AUTOMATIC_DISCOVERY_RANGE:-LOCALHOST}
prompt=${PROMPT:-What is the capital of France?}

decoder_node --ros-args -p model:="${MODEL:-embedded}" &
node=$!
trap 'kill -INT $node 2>/dev/null; wait $node 2>/dev/null || true' EXIT
echo "[demo] prompt: $prompt"
if [ -n "${FOLLOW_UP:-}" ]; then
  # Two turns of one conversation through the Generate action: the second prefills only what
  # the first left out of the KV cache (its "prompt tokens cached" line says how much).
  echo "[demo] follow-up: $FOLLOW_UP"
  printf '%s\n%s\n' "$prompt" "$FOLLOW_UP" | prompt_client --chat
else
  prompt_client --prompt "$prompt"
fi
