#!/usr/bin/env bash
# End to end on a real cluster: kind + training-operator v1.9.4 + MinIO + the trainer image,
# then `kctl-train apply examples/kind-cpu.yaml --wait --to ...` and checks on what
# was collected. Needs docker, kind and kubectl; run from the repository root after
# `make venv`. Leaves the cluster for inspection unless KEEP_CLUSTER=0.
set -euo pipefail
cd "$(dirname "$0")/../.."
CLUSTER=${CLUSTER:-kctl-train-e2e}
KCTL=.venv/bin/kctl-train
OUT=${OUT:-out/e2e}
export AWS_ACCESS_KEY_ID=minio AWS_SECRET_ACCESS_KEY=minio-e2e-secret AWS_REGION=us-east-1

if ! kind get clusters | grep -qx "$CLUSTER"; then
  kind create cluster --name "$CLUSTER" --config tests/e2e/kind-config.yaml --wait 120s
fi
kubectl config use-context "kind-$CLUSTER"

echo "--- training-operator v1.9.4"
kubectl apply --server-side -k \
  "github.com/kubeflow/training-operator.git/manifests/overlays/standalone?ref=v1.9.4"
kubectl -n kubeflow rollout status deployment/training-operator --timeout=300s

echo "--- MinIO"
kubectl apply -f tests/e2e/minio.yaml
kubectl -n minio rollout status deployment/minio --timeout=300s
kubectl create secret generic minio-credentials --dry-run=client -o yaml \
  --from-literal=AWS_ACCESS_KEY_ID="$AWS_ACCESS_KEY_ID" \
  --from-literal=AWS_SECRET_ACCESS_KEY="$AWS_SECRET_ACCESS_KEY" | kubectl apply -f -
.venv/bin/python - <<'PY'
import time, boto3
s3 = boto3.client("s3", endpoint_url="http://127.0.0.1:30900")
for _ in range(60):
    try:
        s3.create_bucket(Bucket="kctl-train"); break
    except s3.exceptions.BucketAlreadyOwnedByYou:
        break
    except Exception:
        time.sleep(2)
PY

echo "--- trainer image"
docker build -f images/trainer/Dockerfile -t kctl-train/trainer:e2e \
  --build-arg BASE="${BASE:-pytorch/pytorch:2.9.1-cuda12.8-cudnn9-runtime}" .
kind load docker-image kctl-train/trainer:e2e --name "$CLUSTER"

echo "--- the job"
$KCTL doctor examples/kind-cpu.yaml || true   # warnings are fine; errors stop apply anyway
$KCTL delete kind-cpu --ignore-not-found --wait
rm -rf "$OUT"
$KCTL apply examples/kind-cpu.yaml --wait --timeout 900 \
  --to "$OUT" --endpoint http://127.0.0.1:30900
$KCTL logs kind-cpu --replica all | tail -20

echo "--- checks"
.venv/bin/python - "$OUT" <<'PY'
import csv, json, sys
from collections import Counter
from pathlib import Path
out = Path(sys.argv[1])
summary = json.loads((out / "summary.json").read_text())
assert summary["complete"] and summary["success"]["step"] == 300, summary
assert summary["checkpoints"][0]["step"] == 300 and not summary["problems"], summary
assert (out / "checkpoints/step-000000000300/model.ckpt").stat().st_size > 0
rows = list(csv.DictReader((out / "outputs/val/all.csv").open()))
per_epoch = Counter((r["epoch"], r["sample"]) for r in rows)
assert rows and set(per_epoch.values()) == {1}, "a row appears twice"
assert {r["rank"] for r in rows} == {"0", "1"}
print(f"e2e ok: {len(rows)} aggregated rows, checkpoint step 300")
PY
if [ "${KEEP_CLUSTER:-1}" = 0 ]; then kind delete cluster --name "$CLUSTER"; fi
