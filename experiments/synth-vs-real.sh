#!/usr/bin/env bash
# Does a policy trained on a synthetic trace do as well as one trained on the real trace?
#
#   experiments/synth-vs-real.sh [MODEL] [OUT]      (MODEL: tvae, ctgan, copulagan, ...; OUT: out/synth-vs-real)
#
# 1. fit MODEL on the ls6 trace before 2023-02-01 (the training split; nothing later is read);
# 2. sample a synthetic ls6 from the trace's first day (2022-10-05) to 2023-03-01, so that it
#    covers the warm-up, the training split and the tuning split (February);
# 3. train rf, xgb, dqn and pg twice with the same settings: on the real trace, and on the
#    synthetic one (its own training and tuning splits: no real job is seen);
# 4. evaluate both model sets on the real test split (March 2023) at loads 1 and 1.05
#    (and 1.13 every 12 h), with the same baselines.
# Probes are cached under out/probe-cache, so reruns only refit. Extra arguments for the
# sampler (--no-chains, --rate-scale X) can be given in SAMPLE_ARGS.
set -euo pipefail
MODEL=${1:-tvae}
OUT=${2:-out/synth-vs-real}
TRACE=${TRACE:-../shared/traces/tacc_ls6_a100/ls6-a100.log.gz}
PROFILE=models/ls6/profile.toml
MIRAGE=${MIRAGE:-.venv/bin/mirage}
JOBS=${JOBS:-2}
read -r -a EXTRA <<<"${SAMPLE_ARGS:-}"
mkdir -p "$OUT"

"$MIRAGE" synth fit --trace "$TRACE" --model "$MODEL" --out "$OUT/$MODEL" --seed 0 --json \
    >"$OUT/fit.json"
"$MIRAGE" synth sample --model-dir "$OUT/$MODEL" --start 2022-10-05 --until 2023-03-01 \
    --seed 1 --out "$OUT/ls6-$MODEL.parquet" --json "${EXTRA[@]}" >"$OUT/sample.json"

train() {  # train NAME TRACE
    "$MIRAGE" train --cluster "$1" --trace "$2" --profile "$PROFILE" --policy all --load 1 \
        --train-split 2022-11-01:2023-02-01 --tune-split 2023-02-01:2023-03-01 \
        --models "$OUT/models" --jobs "$JOBS" --json >"$OUT/train-$1.json"
}
train ls6 "$TRACE"
train "ls6-$MODEL" "$OUT/ls6-$MODEL.parquet"

POLICIES=reactive,fixed-lead,slurm-estimate,running-average,qbets,oracle,rf,xgb,dqn,pg
for name in ls6 "ls6-$MODEL"; do
    for spec in 1:4 1.05:4 1.13:12; do
        load=${spec%%:*} every=${spec##*:}
        "$MIRAGE" evaluate --cluster ls6 --trace "$TRACE" --profile "$PROFILE" --load "$load" \
            --every-h "$every" --policies "$POLICIES" --models "$OUT/models/$name" \
            --jobs "$JOBS" --out "$OUT/eval-$name-$load" --json >"$OUT/eval-$name-$load.json"
    done
done
.venv/bin/python experiments/synth-vs-real-table.py "$OUT" "ls6-$MODEL"
