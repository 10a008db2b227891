#!/usr/bin/env bash
# Installs the Debian packages the corpus of deltaserve-tiny-moe comes from and builds it.
#     as root, from the repository root:  bash tools/train_tiny/make_corpus.sh [OUT_DIR]
# OUT_DIR defaults to carry/corpus (git-ignored; copy it along to the GPU machine). Packages already
# installed are left at their version (--no-upgrade): the Python standard library is the
# interpreter's own. manifest.json records every package version used.
set -euo pipefail
OUT=${1:-carry/corpus}
PKGS="fortunes fortunes-min jargon-text gnu-standards debian-faq python3.11-doc libpython3.11-stdlib"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends --no-upgrade $missing
fi
/usr/bin/python3 "$(dirname "$0")/make_corpus.py" --out "$OUT"
