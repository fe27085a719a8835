#!/usr/bin/env bash
# The manual (docs/, an mdBook): the generated reference pages are what the
# code produces now, the hand-written ones name every configuration key,
# metric and alert (and nothing else), the book builds, and no link inside
# it is broken.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v mdbook >/dev/null 2>&1; then
    echo "installing mdbook from crates.io"
    cargo install mdbook --locked --version "^0.5" --quiet
fi

cargo run --locked --quiet -p xtask -- docs --check
mdbook build docs
python3 .ci/check-book-links.py
