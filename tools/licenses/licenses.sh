#!/usr/bin/env bash
# Third-party licences of ddb-outbox, read by go-licenses (pinned in
# tools/licenses/go.mod) from each Go package's licence file, and by node
# from package-lock.json for the Node tools.
#
#   licenses.sh report   rewrite docs/THIRD-PARTY-LICENSES.md
#   licenses.sh check    fail if a dependency's licence is not in ALLOWED,
#                        or if docs/THIRD-PARTY-LICENSES.md is stale
#
# GO_LICENSES names the go-licenses binary (the Makefile builds it).
set -euo pipefail
cd "$(dirname "$0")/../.."

GO_LICENSES=${GO_LICENSES:?set GO_LICENSES to the go-licenses binary}
GO_LICENSES=$(cd "$(dirname "$GO_LICENSES")" && pwd)/$(basename "$GO_LICENSES")
OWN=github.com/ddb-outbox/ddb-outbox
TEMPLATE=$PWD/tools/licenses/report.tpl
REPORT=docs/THIRD-PARTY-LICENSES.md

# Licences compatible with distributing this project under Apache-2.0
# (permissive, no copyleft). Add one only after reading it. LICENSES_ALLOWED
# overrides the list (to see the check fail, e.g. without MIT).
# CC-BY-4.0 and FTL (permissive, attribution in NOTICE) came with the plots:
# see REVIEWED below.
ALLOWED=${LICENSES_ALLOWED:-Apache-2.0,MIT,BSD-2-Clause,BSD-3-Clause,ISC,CC-BY-4.0,FTL}

# Licences go-licenses reports as "Unknown" (its classifier does not know
# the text), each read by hand; a row is rewritten only for this exact
# package. Both are permissive with attribution, credited in NOTICE, and
# reach only the bench's plots (gonum/plot in cmd/outboxdev), no library or
# Lambda function:
#   github.com/ajstarks/svgo        CC-BY-4.0 (LICENSE, LICENSE-link.txt)
#   github.com/golang/freetype/...  FTL, chosen from "FTL or GPL-2.0+" (LICENSE)
REVIEWED='github.com/ajstarks/svgo=CC-BY-4.0
github.com/golang/freetype/raster=FTL'

# go_report DIR ARGS...: one Markdown row per package of DIR's module build
# (tests included for the root module), this project's own packages left out.
go_report() {
	local dir=$1
	shift
	(cd "$dir" && "$GO_LICENSES" report ./... "$@" --ignore "$OWN" --template "$TEMPLATE" 2>/dev/null) | sed '/^$/d' |
		REVIEWED=$REVIEWED awk -F' [|] ' '
			BEGIN { n = split(ENVIRON["REVIEWED"], r, "\n"); for (i = 1; i <= n; i++) { k = r[i]; sub(/=.*/, "", k); v = r[i]; sub(/^[^=]*=/, "", v); lic[k] = v } }
			{ name = $1; sub(/^[|] `/, "", name); sub(/`$/, "", name)
			  if ((name in lic) && $3 == "Unknown |") { print $1 " | " $2 " | " lic[name] " |"; next } print }' |
		LC_ALL=C sort
}

npm_report() {
	node -e '
		const lock = require("./package-lock.json");
		const rows = Object.entries(lock.packages)
			.filter(([path]) => path.startsWith("node_modules/"))
			.map(([path, p]) => "| `" + path.slice("node_modules/".length) + "` | " + p.version + " | " + p.license + " |");
		console.log(rows.sort().join("\n"));'
}

render() {
	cat <<'HEAD'
# Third-party licences

ddb-outbox is licensed under Apache-2.0 (see [LICENSE](../LICENSE)). This page lists the licence of
every third-party package it is built with, as read from each package's licence file by
[go-licenses](https://github.com/google/go-licenses) (Go) and from `package-lock.json` (Node).
It is generated: run `make licenses` after changing a dependency. `make lint` fails if a licence
is not one of Apache-2.0, MIT, BSD-2-Clause, BSD-3-Clause, ISC, CC-BY-4.0 or FTL, or if this page is
stale. Two rows were classified by hand because go-licenses reports their text as unknown
(`REVIEWED` in `tools/licenses/licenses.sh`): `github.com/ajstarks/svgo` (CC-BY-4.0) and
`github.com/golang/freetype/raster` (FTL, chosen from FTL or GPL-2.0-or-later); both reach only
the bench's plots (gonum/plot in `cmd/outboxdev`) and are credited in NOTICE.

None of these packages is copied into this repository; the Go and npm tools fetch them when you
build. A module that imports this library links only the packages its own imports reach.

## Root module `github.com/ddb-outbox/ddb-outbox` (libraries, Lambda functions, dev tools, tests)

| package | version | licence |
|---|---|---|
HEAD
	go_report . --include_tests
	cat <<'MID'

## Nested module `github.com/ddb-outbox/ddb-outbox/infra` (the CDK app and construct)

| package | version | licence |
|---|---|---|
MID
	go_report infra
	cat <<'NODE'

## Node tools (`package.json`: Dynoxide, the CDK CLI, the JSON Schema validator used by tests)

Development tools only: nothing here is linked into a Go binary or a Lambda function.

| package | version | licence |
|---|---|---|
NODE
	npm_report
	cat <<'TAIL'

The build tools pinned in `tools/lint` (golangci-lint, actionlint) and `tools/licenses`
(go-licenses), and gremlins (`make mutation`), run on a developer's machine and are not part of
what this project distributes.
TAIL
}

# check: render the report once, refuse any row whose licence is not in
# ALLOWED (an SPDX "(A OR B)" is fine when one choice is; "Unknown", when
# go-licenses cannot classify a licence file, is refused), then compare with
# the committed report.
check() {
	local fresh status=0
	fresh=$(mktemp)
	render >"$fresh"
	ALLOWED=$ALLOWED awk -F' [|] ' '
		BEGIN { n = split(ENVIRON["ALLOWED"], a, ","); for (i = 1; i <= n; i++) ok[a[i]] = 1 }
		/^[|] `/ {
			rows++
			name = $1; sub(/^[|] /, "", name)
			lic = $3; sub(/ [|]$/, "", lic); expr = lic; gsub(/[()]/, "", expr)
			n = split(expr, choices, / OR /); good = 0
			for (i = 1; i <= n; i++) if (choices[i] in ok) good = 1
			if (!good) { printf "licence %s of %s is not in the allow-list\n", lic, name; bad++ }
		}
		END {
			printf "licences: %d packages checked against %s, %d refused\n", rows, ENVIRON["ALLOWED"], bad
			exit (bad > 0 || rows == 0)
		}' "$fresh" || status=1
	if ! diff -u "$REPORT" "$fresh"; then
		echo "$REPORT is stale: run make licenses" >&2
		status=1
	fi
	rm -f "$fresh"
	return $status
}

case ${1:-} in
report) render >"$REPORT" && echo "wrote $REPORT" ;;
check) check ;;
*) echo "usage: $0 report|check" >&2; exit 2 ;;
esac
