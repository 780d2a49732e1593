#!/usr/bin/env bash
# tests/golden/update.sh — regenerate the golden IR dumps after an intended change to the IR or a pass;
# review the diff before committing it.
set -eu
cd "$(dirname "$0")/../.."
for p in front partition fuse memplan; do
	bin/glmc dump models/llama.lua --weights ../shared/fixtures/hf/llama --tp 2 --after $p >tests/golden/llama-tp2.after-$p.txt
done
git diff --stat tests/golden
