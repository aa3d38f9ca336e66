#!/usr/bin/env bash
# make demo: run examples/demo.jsonl on the embedded model (filled in by the job-runner work).
set -euo pipefail
echo "longhaul demo: the batch runner has not landed yet; build/longhaul --help shows what exists." >&2
exit 1
