#!/bin/sh
# Fetch the three corpora behind the ranking question pool (benchmarks/data/pool_*_tune.jsonl and *_test.jsonl):
#   starlette-docs  the Markdown docs of Starlette 1.10.0 (its PyPI sdist's docs/ folder; BSD-3-Clause)
#   zsh-html        the Zsh manual in HTML, Debian's zsh-doc 5.9-4 (the pages that hold text: the short
#                   pages that only link to an anchor of another page are left out)
#   flask-docs      the reStructuredText docs of Flask 3.1.3 (its PyPI sdist's docs/ folder; BSD-3-Clause)
#
#   sh benchmarks/fetch_pool.sh [DEST]      # DEST defaults to ../corpora (beside the checkout, as ../shared)
#   mdrag index DEST/starlette-docs --index pool_starlette
#   mdrag eval benchmarks/data/pool_starlette_test.jsonl --index pool_starlette --mode all --json
#
# The questions were written against these versions; another version may move a detail.
set -eu
DEST=${1:-"$(cd "$(dirname "$0")/../.." && pwd)/corpora"}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$DEST"

pip download -q --no-deps --no-binary :all: starlette==1.10.0 flask==3.1.3 -d "$WORK"
for pkg in starlette-1.10.0:starlette-docs flask-3.1.3:flask-docs; do
    src=${pkg%%:*}
    out=$DEST/${pkg##*:}
    tar xzf "$WORK/$src.tar.gz" -C "$WORK" "$src/docs"
    rm -rf "$out"
    mkdir -p "$out"
    # the pages only: not the Sphinx build files, images or stylesheets
    (cd "$WORK/$src/docs" && find . \( -name '*.md' -o -name '*.rst' \) -print) | while read -r page; do
        mkdir -p "$out/$(dirname "$page")"
        cp "$WORK/$src/docs/$page" "$out/$page"
    done
    echo "$(find "$out" -type f | wc -l) pages in $out"
done

apt-get update >/dev/null
(cd "$WORK" && apt-get download zsh-doc=5.9-4 >/dev/null 2>&1)
dpkg-deb -x "$WORK"/zsh-doc_*.deb "$WORK/zsh"
out=$DEST/zsh-html
rm -rf "$out"
mkdir -p "$out"
# A page under 2,500 bytes is a redirect stub (a title and a link to the anchor that holds the text).
find "$WORK/zsh/usr/share/doc/zsh-common/html" -name '*.html' -size +2500c -exec cp {} "$out" \;
echo "$(find "$out" -type f | wc -l) HTML pages in $out"
