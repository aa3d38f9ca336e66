#!/usr/bin/env bash
# Build examples/demo-repo.tar.gz, the archive `make demo` asks its two questions about: CPython
# 3.11's `concurrent` and `asyncio` packages and the first six modules of `email` (PSF License,
# included as LICENSE.txt), about 204K tokens with models/haul-tiny's tokenizer, with two planted
# facts: "The special magic lighthouse number is: 7305614." at the top of asyncio/base_events.py
# (3% into the prompt) and DEFAULT_WORKER_TIMEOUT = 4817 in concurrent/futures/thread.py
# (76% in). Issue 6 sets the size (at least 200K tokens) and the time (under 2 minutes on
# 2 cores). Deterministic (sorted names, fixed mtimes and owners), so rebuilding from the same
# Python sources gives the same bytes; the committed archive was built from CPython 3.11.7.
# Usage: tools/make_demo_archive.sh [PYTHON_LIB_DIR]
set -euo pipefail
lib=${1:-$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')}
out=$(cd "$(dirname "$0")/.." && pwd)/examples/demo-repo.tar.gz
email=(__init__ _encoded_words _header_value_parser _parseaddr _policybase base64mime)
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
(cd "$lib" && find concurrent asyncio -name '*.py' -print0 | xargs -0 cp --parents -t "$t")
mkdir -p "$t/email"
for m in "${email[@]}"; do cp "$lib/email/$m.py" "$t/email/"; done
cp "$lib/LICENSE.txt" "$t/LICENSE.txt"
# planted facts (the demo's questions ask for them)
sed -i '0,/^import /s//DEFAULT_WORKER_TIMEOUT = 4817\n\nimport /' "$t/concurrent/futures/thread.py"
sed -i '0,/^import /s//# The special magic lighthouse number is: 7305614.\nimport /' "$t/asyncio/base_events.py"
grep -q 'DEFAULT_WORKER_TIMEOUT = 4817' "$t/concurrent/futures/thread.py"
grep -q 'lighthouse number is: 7305614' "$t/asyncio/base_events.py"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$t" -czf "$out" LICENSE.txt asyncio concurrent email
echo "$out: $(tar tzf "$out" | wc -l) entries, $(stat -c %s "$out") bytes"
