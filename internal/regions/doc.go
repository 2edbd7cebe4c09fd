// Package regions is a two-Region local runtime of a multi-Region outbox
// (issue 34, docs/MULTI-REGION.md), for tests and the chaos command: two
// Regions, RegionA (eu-west-1) and RegionB (eu-central-1), each a
// localstack.Stack on its own Dynoxide server — its own relay, bus,
// queues, consumers and reconciler, publishing only the records written in
// it — with a bank as the application:
//
//   - accounts (AccountsTable, a global table) written with
//     outbox.Writer.Update in the account's home Region (the Region that
//     opened it), events AccountOpened, Deposited and Withdrawn with their
//     sequences (Bank);
//   - an ordered consumer, Statement, homed in RegionB (its state and
//     statements in regional tables), to which RegionA's bus forwards the
//     accounts' events, and an unordered consumer, Notify, homed in RegionA,
//     to which RegionB's bus forwards them (localstack.Forward: one hop);
//   - the audit (Observe, Audit): every committed event applied once by
//     each consumer (lost, double_applied), in sequence order by the
//     ordered one (applied_out_of_order), published only by its origin
//     Region outside a takeover (published_by_non_origin_in_steady_state),
//     no outbox status moving backward in a Region's stream
//     (status_regression), none left pending in its origin Region
//     (stuck_pending), balances as the last event says
//     (balance_mismatch) and, with replication, the same in both Regions
//     (diverged).
//
// The Bank's writers use each Region's Stack.WriterConfig (with its
// Region): the writer stamps origin_region and the Region's pending shard
// on every record, and fences each account by its home Region (a write
// elsewhere is refused: outbox.ErrNotHomeRegion).
//
// The replication between the Regions' global tables (the outbox and the
// accounts) is Config.Replication: MREC starts internal/mrec's replicator
// (per-item delays with a long tail, coalescing, last writer wins,
// pause/lose); without one each Region's tables are its own. Suspend and
// Resume take a Region down and back (localstack.Stack.Suspend). Chaos
// runs the bank in both Regions under the replicator's faults, a Region
// lost and taken over (reconciler.DeclareTakeover), and audits it.
package regions
