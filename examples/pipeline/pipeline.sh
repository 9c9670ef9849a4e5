#!/bin/sh
# The QPU stage of a workflow, as plain flux commands: ROUNDS rounds of a decomposition
# into N pieces, N held QPU jobs (one per piece) and an aggregation, every job of every
# round submitted at once. Each QPU job waits for its round's decomposition
# (--dependency=afterok): its quantum task is created only once the decomposition has
# written its program, and never if the decomposition fails. The aggregation waits for
# every QPU job of its round and reads their counts through the handler service; the
# next round's decomposition waits for the aggregation.
#
#   examples/pipeline/pipeline.sh DIR [N [ROUNDS]]     # prints the last aggregation's job
#
# A step that has already failed when a later one is submitted makes flux submit refuse
# that one (Flux's rule for after* dependencies), and the script stops there.
#
# DEVICE (default local:local-sv1) is the device request, FAILOVER (default simulator)
# where a piece goes when its device fails, PYTHON the interpreter of the classical steps.
set -eu
DIR=$(mkdir -p "$1" && cd "$1" && pwd)
N=${2:-4}
ROUNDS=${3:-2}
DEVICE=${DEVICE:-local:local-sv1}
FAILOVER=${FAILOVER:-simulator}
PYTHON=${PYTHON:-python3}
PIECES=$(cd "$(dirname "$0")" && pwd)/pieces.py

after=""
round=0
while [ "$round" -lt "$ROUNDS" ]; do
    prep=$(flux submit --job-name="decompose-$round" $after \
        "$PYTHON" "$PIECES" decompose "$DIR" "$round" --pieces "$N")
    waits=""
    qpu=""
    i=0
    while [ "$i" -lt "$N" ]; do
        job=$(flux submit --job-name="piece-$round.$i" --dependency="afterok:$prep" \
            --setattr=qpu.device="$DEVICE" --setattr=qpu.failover="$FAILOVER" \
            --setattr=qpu.program="$DIR/round-$round/piece-$i.qasm" true)
        waits="$waits --dependency=afterok:$job"
        qpu="$qpu $job"
        i=$((i + 1))
    done
    # shellcheck disable=SC2086  # one word per option and per job
    aggregate=$(flux submit --job-name="aggregate-$round" $waits \
        "$PYTHON" "$PIECES" aggregate "$DIR" "$round" $qpu)
    after="--dependency=afterok:$aggregate"
    round=$((round + 1))
done
echo "$aggregate"
