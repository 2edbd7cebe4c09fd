// A module outside the ddb-outbox repository, as a team writes one: it
// requires the released versions and has no replace. The release proof
// (tools/release/proof) copies it out of the repository and resolves both
// modules from a module proxy built from the working tree.
module example.com/outside

go 1.26.8

require (
	github.com/ddb-outbox/ddb-outbox v0.2.0
	github.com/ddb-outbox/ddb-outbox/infra v0.2.0
)
