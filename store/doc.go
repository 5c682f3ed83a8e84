// # Message log
//
// Messages are kept in a Log per queue (log.go, segment.go, syncer.go): an
// append-only sequence of records in segment files, as in LavinMQ. The owner
// (the queue) chooses what a record means through its type byte and payload,
// keeps the positions it needs, and reclaims whole segments once nothing in
// them is live.
//
// Layout: dir/NNNNNNNNNNNNNNNN.seg, the segment number in 16 decimal digits,
// numbers increasing by one per roll. A segment is an 8-byte header ("WRNL",
// u32 version 1) followed by records [u32 length][u32 CRC-32C of type and
// payload][u8 type][payload], little-endian. A segment rolls when the next
// record would take it past Options.SegmentSize (default 8 MiB); a larger
// record gets a segment of its own. A record is addressed by Pos{Seg, Off}.
//
// Durability order:
//  1. Append copies the record into a buffer (64 KiB) in memory; it is not
//     durable. The buffer is written to the file when full, on Sync, on a
//     roll, and before ReadAt or Scan needs it.
//  2. Sync writes the buffer and fdatasyncs the active segment; when it
//     returns nil, every record appended before it was called is on disk.
//     A roll first writes and syncs the segment it seals, then creates the
//     next segment and syncs the directory, so the durable records are always
//     a prefix of the appended ones.
//  3. Syncer.Request callbacks (publisher confirms) run only after the fsync
//     that covers their records has returned.
//
// RemoveSegmentsBefore deletes files and syncs the directory before it
// returns. If a write or an fsync fails (a full disk: ENOSPC), the log is
// failed: Append, Roll and Sync return the error, and nothing is reported
// durable. It repairs itself once writes succeed again (tried at most once
// per Options.RetryInterval, on those calls), losing nothing: after a failed
// write the partial write is cut and the buffer written again; after a
// failed fsync, whose dirty pages the kernel may have marked clean without
// writing them, the bytes written since the last good fsync are read back,
// verified record by record, written again and synced; a segment that could
// not be created is created. Only if those bytes no longer read back intact
// (the pages were evicted) does the log stay failed until it is reopened.
//
// Recovery (OpenLog) reads and verifies every segment. A record that fails
// its checksum or framing is either damage in the middle of a segment (a bit
// flipped on disk; after a crash, a block of the unsynced tail written back
// out of order) or a torn tail (the crash cut the last write). Recovery tells
// them apart by resynchronising (segReader.resync): it looks for the first
// later offset where a record with a valid checksum starts and is followed
// by another valid record or by the end of the file. Two checksummed records
// in a row do not occur by chance in torn or damaged bytes, so if it finds
// one, only the damaged range is skipped (it stays in the file, is skipped
// again at every open, and is logged at Warn with its offset and size), and
// the records after it are kept. If it finds none, the rest is a torn or
// garbage tail: in the last segment the file is truncated after the last good
// record and synced (a torn tail is cut, never delivered); in an older segment
// (synced before its roll, so only disk corruption explains it) the rest of
// that segment is ignored and the later segments are kept. Both are logged at
// Warn. OpenLog fails only on I/O errors, never because of the data; no API
// returns a record whose checksum fails (ReadAt and Scan verify again and
// return ErrCorrupt). Guarantee after a crash without disk corruption: the
// records recovered were appended, in order, and include every record whose
// Sync returned nil (or whose Syncer request completed with nil): every
// synced record, then a subsequence of the unsynced ones (a prefix of them
// unless the crash left a hole followed by intact records). With disk
// corruption, what is lost is the damaged records (a record sharing a damaged
// range with its neighbour, or one between two damaged ranges, may go with
// them), not the segment.
//
// Positions: Pos values are stable while the log is open and across clean
// restarts. Positions of records lost in recovery (an unsynced tail that was
// cut) are reused by the next appends, so an owner must rebuild its index from
// Scan after OpenLog, never keep positions from before a crash. A checksum
// covers a record's type and payload, not its position: ReadAt of a position
// that was never returned by Append or Scan may return ErrCorrupt, or, if
// the bytes there happen to frame a valid record (a payload that embeds one),
// that record.
//
// Resources: a Log keeps a 64 KiB append buffer and a file per segment. By
// default every segment file stays open while the log is open: one file
// descriptor per 8 MiB of queued data per queue. Logs that share a FilePool
// (Options.Files) keep at most its bound of files open between them instead:
// files are opened on demand and the least recently used unused ones closed,
// after an fsync if they hold writes no fsync has covered (filepool.go). A
// node's descriptors then do not grow with its number of queues.
//
// Group commit: a Syncer serves all the logs of a node. Requests made while
// it syncs are batched into the next round, which syncs each log named once;
// SyncerStats.RequestsPerFsync reports the factor.
//
// Concurrency: a Log is safe for concurrent use. Append and Sync may run
// together (appends continue while an fsync is in flight); ReadAt and Scan
// may run concurrently with appends; RemoveSegmentsBefore waits for reads and
// for an fsync in flight. Scan callbacks must not call Close. Lock order:
// Log.syncMu, Log.rmu, Log.mu. One process at a time may open a directory
// (not enforced by the log; the node holds a lock on its data directory).
//
// Files and tests: FS abstracts the file system; OSFS is the real one and
// MemFS simulates crashes and torn writes for crash tests.
package store
