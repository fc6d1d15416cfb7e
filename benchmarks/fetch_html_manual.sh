#!/bin/sh
# Fetch the HTML manual behind benchmarks/data/gitdoc_qa.jsonl: Debian's git-doc package
# (Git's own documentation rendered to HTML by asciidoc; GPL-2, see usr/share/doc/git-doc/copyright).
# The package is not in the repository (about 14 MB unpacked); this script puts its HTML pages
# (206 top-level pages, 16 under howto/, 20 under technical/) into a folder of its own:
#
#   sh benchmarks/fetch_html_manual.sh [DEST]      # DEST defaults to ../corpora/git-doc-html (beside the checkout, as ../shared)
#   mdrag index DEST --index gitdoc
#   mdrag eval benchmarks/data/gitdoc_qa.jsonl --index gitdoc --mode all --json
#
# The questions were written against bookworm's git-doc 1:2.39.5; another version may move a detail.
set -eu
DEST=${1:-"$(cd "$(dirname "$0")/../.." && pwd)/corpora/git-doc-html"}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
apt-get update >/dev/null
(cd "$WORK" && apt-get download git-doc >/dev/null)
dpkg-deb -x "$WORK"/git-doc_*.deb "$WORK/unpacked"
PAGES=usr/share/doc/git-doc  # where the package keeps its pages, inside the unpacked .deb (not this machine)
SRC="$WORK/unpacked/$PAGES"
mkdir -p "$DEST"
# Only the rendered pages: the asciidoc sources (*.txt) beside them would index the manual twice.
(cd "$SRC" && find . -name '*.html' -print) | while read -r page; do
    mkdir -p "$DEST/$(dirname "$page")"
    cp "$SRC/$page" "$DEST/$page"
done
echo "$(find "$DEST" -name '*.html' | wc -l) HTML pages in $DEST"
