#!/bin/bash
# Interleaved LMDB benches: a baseline checkout vs a measured checkout, one JSON line each run.
#   BASE=/path/to/base BASE_HEAD=abc1234 MAIN=/path/to/main OUT=results.jsonl ROUNDS="1 2 3" bash bench/results/interleave.sh
py=${PYTHON:-python}
mainhead=$(git -C "$MAIN" rev-parse --short HEAD)
for r in ${ROUNDS:-1 2 3}; do
  for side in base main; do
    if [ $side = base ]; then dir=$BASE; head=$BASE_HEAD; else dir=$MAIN; head=$mainhead; fi
    cd "$dir"
    line=$(PYTHONPATH=$dir $py bench/engine_throughput.py --workflows 20000 2>/dev/null | grep '^{' | tail -1)
    echo "{\"label\": \"engine_throughput-$side\", \"head\": \"$head\", \"round\": $r, \"result\": $line}" >> "$OUT"
    line=$(PYTHONPATH=$dir $py bench/throughput.py --workflows 20000 --shards 2 2>/dev/null | grep '^{' | tail -1)
    echo "{\"label\": \"throughput-$side\", \"head\": \"$head\", \"round\": $r, \"result\": $line}" >> "$OUT"
  done
done
