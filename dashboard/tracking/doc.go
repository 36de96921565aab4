// Package tracking holds the dashboard's tracking services that are not
// HTTP: applying a batch of ingested events (Apply, Ingest), importing the
// training SDK's spool files (SpoolImporter), following the store's change
// feed into the live stream (FeedTailer, FeedOf, StreamEvent, ReplayFeed)
// and failing the runs whose process is gone (ReconcileRuns). cmd/fw starts
// them; dashboard/api's handlers call Apply and ReplayFeed.
package tracking
