"""What the flux-tier loop tests share: a one-qubit program each step measures, and the
step script a loop's steps run (it reads its task, writes its value and hands the next
program on; given an iteration number as $1, that step exits 3 instead)."""

from __future__ import annotations

PROGRAM = "OPENQASM 3.0;\nqubit[1] q;\nbit[1] c;\nc[0] = measure q[0];\n"

STEP_SH = """
set -e
flux quantum task --json > "$FLUX_QPU_LOOP_DIR/result.$FLUX_QPU_ITERATION.json"
if [ "$FLUX_QPU_ITERATION" = "${1:-none}" ]; then exit 3; fi
echo "$FLUX_QPU_ITERATION" > "$FLUX_QPU_LOOP_VALUE"
cp "$FLUX_QPU_LOOP_DIR/programs/$FLUX_QPU_ITERATION.qasm" "$FLUX_QPU_NEXT_PROGRAM"
"""
