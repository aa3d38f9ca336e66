#!/usr/bin/env bash
# Makes the seed corpus of fuzz_ingest (tests/fuzz/corpus/fuzz_ingest/): one small input per
# format and filter ingest reads, from a tiny tree, with the real tools. Each seed starts with the
# option byte fuzz_ingest reads first (0x00: archive order, on_error fail, default caps).
# Usage: tools/ingest_fuzz_seeds.sh   (from the repository root; needs scripts/deps.sh test's tools)
set -euo pipefail
out=$PWD/tests/fuzz/corpus/fuzz_ingest
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out" "$tmp/t/src" "$tmp/t/skip"
cd "$tmp/t"
printf 'int main(void) { return 0; }\n' > src/main.c
printf 'caf\xe9 \xe2\x82\xac\r\n' > notes.txt
printf '\x00\x01binary' > src/x.o
printf 'skipped\n' > skip/a.txt
: > empty
ln -s src/main.c link
cd "$tmp"
seed() { { printf '\x00'; cat "$2"; } > "$out/$1"; }
tar -C t -cf a.tar . && seed tar a.tar
tar -C t -czf a.tgz . && seed tar.gz a.tgz
tar -C t -cjf a.tbz . && seed tar.bz2 a.tbz
tar -C t -cJf a.txz . && seed tar.xz a.txz
tar -C t --zstd -cf a.tzst . && seed tar.zst a.tzst
tar -C t -cf - . | lz4 -q > a.tlz4 && seed tar.lz4 a.tlz4
bsdtar -C t --format pax -cf a.pax . && seed pax a.pax
(cd t && zip -qry ../a.zip .) && seed zip a.zip
(cd t && 7z a -bd -snl ../a.7z . >/dev/null) && seed 7z a.7z
(cd t && find . -print0 | cpio -0 -o -H newc --quiet) > a.cpio && seed cpio a.cpio
(cd t/src && ar rc ../../a.ar main.c x.o) && seed ar a.ar
gzip -c t/notes.txt > n.gz && seed gz n.gz
xz -c t/notes.txt > n.xz && seed xz n.xz
cp t/notes.txt plain && seed plain plain
ls -la "$out"
