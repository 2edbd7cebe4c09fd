#!/usr/bin/env bash
# make release VERSION=X.Y.Z: tag the release of both modules at HEAD.
#
# Refuses (exit 1, nothing tagged) a version that is not semantic (X.Y.Z,
# optional -pre-release, no "v"), a dirty working tree (a tag names a commit,
# not what is on disk), a version CHANGELOG.md does not name as its newest
# released section "## [X.Y.Z] - YYYY-MM-DD", a version whose tag vX.Y.Z or
# infra/vX.Y.Z exists, an infra/go.mod that does not require
# github.com/ddb-outbox/ddb-outbox vX.Y.Z or has a replace, and a go.work that
# does not point that version at the working tree. Then creates the annotated
# tags vX.Y.Z (the root module) and infra/vX.Y.Z (the CDK module; Go requires
# a subdirectory module's tag to carry its directory, go.dev/ref/mod#vcs-version)
# and prints the push command. It never pushes.
#
# Runs in the repository of the current directory.
set -euo pipefail

fail() { echo "release: $*" >&2; exit 1; }

V=${1:-}
[ -n "$V" ] || fail "usage: release.sh X.Y.Z (make release VERSION=X.Y.Z)"
SEMVER='^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$'
[[ $V =~ $SEMVER ]] || fail "\"$V\" is not a semantic version X.Y.Z (no \"v\" prefix)"

cd "$(git rev-parse --show-toplevel)"
ROOT=github.com/ddb-outbox/ddb-outbox

if [ -n "$(git status --porcelain)" ]; then
	git status --short >&2
	fail "the working tree is not clean: commit or stash first (a tag names a commit)"
fi

newest=$(grep -E '^## \[[^]]+\] - [0-9]{4}-[0-9]{2}-[0-9]{2}[[:space:]]*$' CHANGELOG.md | head -1 || true)
grep -qE "^## \[${V//./\\.}\] - [0-9]{4}-[0-9]{2}-[0-9]{2}[[:space:]]*\$" CHANGELOG.md ||
	fail "CHANGELOG.md has no released section \"## [$V] - YYYY-MM-DD\" (cut it: tools/release/cut.sh $V YYYY-MM-DD)"
case "$newest" in
"## [$V] - "*) ;;
*) fail "$V is not CHANGELOG.md's newest release (${newest:-none}): a release tags the newest section" ;;
esac

for t in "v$V" "infra/v$V"; do
	if git rev-parse -q --verify "refs/tags/$t" >/dev/null; then
		fail "tag $t exists (at $(git rev-parse --short "$t^{commit}")): a released version is never moved; release a new one"
	fi
done

# infra/go.mod: the requirement users read, and no replace (go.work serves
# work inside the repository).
if grep -qE '^[[:space:]]*replace([[:space:]]|\()' infra/go.mod; then
	fail "infra/go.mod has a replace directive: a user's build ignores it; remove it (go.work covers the repository)"
fi
grep -qE "^[[:space:]]*(require[[:space:]]+)?${ROOT//./\\.}[[:space:]]+v${V//./\\.}([[:space:]]|\$)" infra/go.mod ||
	fail "infra/go.mod does not require $ROOT v$V (go mod edit -require=$ROOT@v$V infra/go.mod)"
grep -qE "^[[:space:]]*(replace[[:space:]]+)?${ROOT//./\\.}[[:space:]]+v${V//./\\.}[[:space:]]+=>[[:space:]]+\./?([[:space:]]|\$)" go.work ||
	fail "go.work does not replace $ROOT v$V => ./ (the working tree stands in for the version infra requires)"

git tag -a "v$V" -m "ddb-outbox v$V (root module $ROOT)"
git tag -a "infra/v$V" -m "ddb-outbox infra/v$V (CDK module $ROOT/infra)"
echo "tagged v$V and infra/v$V at $(git rev-parse --short HEAD); nothing pushed. Publish with:"
echo "  git push origin v$V infra/v$V"
