#!/usr/bin/env bash
# The default dependency tree is a budget: every crate that a default build
# of a ruda crate compiles (normal and build dependencies, this machine's
# target, x86_64 Linux, whatever the host) is listed in deps/default-tree.txt, with the number of versions
# when more than one is built. This check fails when the tree grows (a new
# crate, or a second version of one) or shrinks without the list saying so,
# so that a dependency only a feature needs cannot slip into every user's
# build unnoticed: gate it behind its feature, or, when every default build
# needs it, run `scripts/check-deps.sh --update` and say in the commit what
# it costs.
set -euo pipefail
cd "$(dirname "$0")/.."
budget=deps/default-tree.txt

listing() {
    for p in ruda-comm ruda-tensor ruda-sphere ruda-sfno ruda-bench ruda-cli; do
        cargo tree --locked --target x86_64-unknown-linux-gnu -p "$p" -e normal,build --prefix none --format '{p}' |
            sed 's/ (.*//' | sort -u |
            awk -v p="$p" '{ n[$1]++ } END { for (k in n) print p ": " k (n[k] > 1 ? " (" n[k] " versions)" : "") }'
    done | LC_ALL=C sort
}

now=$(listing)
if [[ "${1:-}" == "--update" ]]; then
    {
        echo "# The default dependency tree of each published ruda crate (scripts/check-deps.sh)."
        echo "$now"
    } > "$budget"
    echo "wrote $budget ($(echo "$now" | wc -l) entries)"
    exit 0
fi
diff_file=$(mktemp)
trap 'rm -f "$diff_file"' EXIT
if ! diff <(grep -v '^#' "$budget") <(echo "$now") > "$diff_file"; then
    echo "The default dependency tree differs from $budget ('>' is new, '<' is gone):" >&2
    cat "$diff_file" >&2
    echo "Gate a new dependency behind the feature that needs it; if every default build needs it, run scripts/check-deps.sh --update and say what it costs." >&2
    exit 1
fi
echo "default dependency tree: $(echo "$now" | wc -l) entries, as budgeted"
