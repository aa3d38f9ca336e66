#!/usr/bin/env bash
# Build examples/demo-repo.tar.gz: CPython 3.11's `concurrent` package (PSF License, included as
# LICENSE.txt) with two planted facts the demo asks about. Deterministic (sorted names, fixed
# mtimes and owners), so rebuilding gives the same bytes with the same Python sources.
# Usage: tools/make_demo_archive.sh [PYTHON_LIB_DIR]
set -euo pipefail
lib=${1:-$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')}
out=$(cd "$(dirname "$0")/.." && pwd)/examples/demo-repo.tar.gz
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
mkdir -p "$t/concurrent"
(cd "$lib" && find concurrent -name '*.py' -print0 | xargs -0 cp --parents -t "$t")
cp "$lib/LICENSE.txt" "$t/LICENSE.txt"
# planted facts (the demo's questions ask for them)
sed -i '0,/^import /s//DEFAULT_WORKER_TIMEOUT = 4817\n\nimport /' "$t/concurrent/futures/thread.py"
sed -i '0,/^import /s//# The special magic lighthouse number is: 7305614.\nimport /' "$t/concurrent/futures/process.py"
grep -q 'DEFAULT_WORKER_TIMEOUT = 4817' "$t/concurrent/futures/thread.py"
grep -q 'lighthouse number is: 7305614' "$t/concurrent/futures/process.py"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$t" -czf "$out" LICENSE.txt concurrent
echo "$out: $(tar tzf "$out" | wc -l) entries, $(stat -c %s "$out") bytes"
