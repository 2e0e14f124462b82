#!/usr/bin/env bash
# A default training run (scripts/train.py, real MNIST) of this checkout against the same run of an earlier
# commit, alternated (old, new, old, new, ...) so that a machine getting busier slows both alike. Prints, per run,
# the whole process's seconds, the fit's seconds, the test accuracy and the fastest epoch.
#   benchmarks/against_commit.sh <commit> <MNIST root> [repeats]      e.g. benchmarks/against_commit.sh 802aef1 data 3
set -euo pipefail
commit=$1 data=$2 repeats=${3:-3}
here=$(cd "$(dirname "$0")/.." && pwd) python=${PYTHON:-$here/.venv/bin/python}
work=$(mktemp -d) && trap 'git -C "$here" worktree remove --force "$work/old" >/dev/null 2>&1; rm -rf "$work"' EXIT
git -C "$here" worktree add --detach "$work/old" "$commit" >/dev/null 2>&1
for i in $(seq "$repeats"); do
    for side in old new; do
        root=$([ $side = old ] && echo "$work/old" || echo "$here")
        start=$(date +%s.%N)
        (cd "$root" && PYTHONPATH="$root/src" "$python" scripts/train.py --data.data_dir "$data" \
            --output_dir "$work/run_${side}_$i" --enable_progress_bar false >"$work/${side}_$i.log" 2>&1)
        end=$(date +%s.%N)
        "$python" - "$work/run_${side}_$i/metrics.json" "$side" "$start" "$end" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
best = min(row["seconds"] for row in m["history"])
print(f"{sys.argv[2]}: process {float(sys.argv[4]) - float(sys.argv[3]):.2f} s, fit {m['fit_seconds']:.2f} s, "
      f"test/acc {m['test/acc']:.4f}, fastest epoch {best:.3f} s")
PY
    done
done
