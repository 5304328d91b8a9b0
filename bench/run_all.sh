#!/usr/bin/env bash
# Run every benchmark in bench/ and leave JSON + PNG results in bench/results/.
# Everything runs on 127.0.0.1; each script starts (and stops) what it needs.
#   bench/run_all.sh                                          # all, ~10-12 minutes (PYTHON=... to choose the interpreter)
#   bench/run_all.sh overhead chain                          # a subset
# LiteLLM is installed on first use into bench/.litellm-venv (or $LITELLM_VENV).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
"$PY" -c 'import matplotlib' 2>/dev/null || echo "note: matplotlib missing in $PY: no PNG plots (pip install matplotlib)"
"$PY" -c 'import uvloop, httptools' 2>/dev/null || echo "note: uvloop/httptools missing: the gateway runs without uvicorn[standard]'s fast loop"
scripts=("$@")
[ ${#scripts[@]} -eq 0 ] && scripts=(overhead chain payload streams websocket)
mkdir -p bench/results
for s in "${scripts[@]}"; do
  echo "=== bench/$s.py ==="
  timeout 900 "$PY" "bench/$s.py" 2>&1 | tee "bench/results/$s.log"
done
