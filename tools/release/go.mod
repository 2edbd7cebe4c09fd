module github.com/ddb-outbox/ddb-outbox/tools/release

go 1.26.8

require golang.org/x/mod v0.42.0
