#!/usr/bin/env bash
# tools/release/cut.sh X.Y.Z YYYY-MM-DD: cut the release in CHANGELOG.md and
# commit it ("release X.Y.Z: CHANGELOG section").
#
#   - CHANGELOG.md: the entries under "## [Unreleased]" move into
#     "## [X.Y.Z] - YYYY-MM-DD", an empty Unreleased section stays above it.
#     When X.Y.Z is already the newest section (the cut redone after more
#     entries were merged under Unreleased), they join it, kind by kind
#     (### Added with ### Added, ...), and the date becomes YYYY-MM-DD.
#   - api/baseline: HEAD, the commit the cut is made on. The cut changes no
#     Go code, so HEAD's API is the release's: the API guard (make apicheck)
#     starts the next Unreleased section from it.
#   - the release's version everywhere a module requires it: infra/go.mod,
#     go.work's replaces, the release proof's outside module, and each
#     examples/*/go.mod that requires one of the two modules.
#
# Refuses a dirty working tree (the baseline must be the cut's API), a
# version that is not semantic or not newer than the newest release (unless
# it is that release: the redo), and an empty Unreleased section.
# Then: make lint test, and make release VERSION=X.Y.Z.
set -euo pipefail

fail() { echo "cut: $*" >&2; exit 1; }
[ $# -eq 2 ] || fail "usage: tools/release/cut.sh X.Y.Z YYYY-MM-DD"
V=$1 DATE=$2
TOOLS=$(cd "$(dirname "$0")" && pwd)
cd "$(git rev-parse --show-toplevel)"
ROOT=github.com/ddb-outbox/ddb-outbox

if [ -n "$(git status --porcelain)" ]; then
	git status --short >&2
	fail "the working tree is not clean: the cut records HEAD's API as the release's, so commit first"
fi

GOWORK=off go run -C "$TOOLS" ./cmd/changelog -file "$PWD/CHANGELOG.md" cut "$V" "$DATE"
git rev-parse HEAD >api/baseline

# The release's version wherever a module requires one of ours.
files=(CHANGELOG.md api/baseline)
require() { # require GO.MOD: set each of our modules it requires to vV
	local f=$1 m
	for m in "$ROOT" "$ROOT/infra"; do
		if grep -qE "^[[:space:]]*(require[[:space:]]+)?${m//./\\.}[[:space:]]+v" "$f"; then
			GOWORK=off go mod edit -require="$m@v$V" "$f"
		fi
	done
	files+=("$f")
}
require infra/go.mod
for f in tools/release/proof/testdata/outside/go.mod examples/*/go.mod; do
	[ -f "$f" ] && require "$f"
done
if [ -f go.work ]; then
	sed -i -E "s#^([[:space:]]*(replace[[:space:]]+)?${ROOT//./\\.}(/infra)?[[:space:]]+)v[^[:space:]]+([[:space:]]+=>)#\1v$V\4#" go.work
	files+=(go.work)
fi

git add -- "${files[@]}"
git commit -q -m "release $V: CHANGELOG section" -m "Unreleased moved into [$V] - $DATE; api/baseline = $(cat api/baseline) (the API of the release); the release's version in infra/go.mod, go.work and the outside modules. Made by tools/release/cut.sh $V $DATE."
echo "cut $V at $(git rev-parse --short HEAD). Next: make lint test, then make release VERSION=$V"
