// Package wal is the node-wide write-ahead log shared by every quorum-queue
// Raft group on a node (issue 14), in the manner of RabbitMQ's Ra WAL: the
// raft host appends the entries and hard states of all its groups' Readies
// as one batch and makes them durable with one fdatasync.
//
// # API
//
//	w, err := wal.Open(wal.Options{Dir: dir})      // recovers; every record referenced once
//	err = w.Replay(func(p wal.Pos, r wal.Record) error { ... }) // once, before any Append
//	pos, err := w.Append([]wal.Record{...})         // buffered, no syscall per record
//	err = w.Sync()                                  // one fdatasync for all appended so far
//	r, err := w.Read(p)                             // concurrent with Append
//	err = w.ReadMany(ps, func(i int, r wal.Record) error { ... }) // many, few preads
//	w.Release(p) / w.ReleaseAll(ps) / w.Retain(p)   // reference counts
//	cs, err := w.Compact(func(old, new wal.Pos, r wal.Record) { ... })
//	st := w.Stats()                                 // st.Compactable > 0: call Compact
//	err = w.Close()  // or w.CrashForTest() in tests of the layers above
//
// A Record is {Group, Index, Term, Kind, Data}; the WAL gives none of them
// a meaning. A Pos is {Seg, Off}: comparable, ordered like the appends.
//
// # Contract with the host
//
// Who holds positions: the host. Append returns one Pos per record; the
// host keeps the positions of the records it still needs (its groups' raft
// log entries, their latest hard state and snapshot metadata, the entries a
// snapshot still lists as live) and Releases each record once it no longer
// needs it (superseded hard state, entries compacted by a snapshot and not
// live, entries overwritten by a new leader, every record of a deleted
// group). The WAL keeps per record only where it is and whether it is
// referenced: 4 bytes per record of a segment while at least a quarter of
// its entries are live; when fewer are, the entries are pruned to the live
// records and their ends (8 bytes per live record), so a segment never
// costs more than 16 bytes per live record, plus 16 bytes per record with
// references beyond the first (Retain). A 1,000,000-record live set costs
// 4 to 16 MB, whatever the number of groups. A segment other than the head is deleted as soon as
// none of its records is referenced. A record must not be used after its
// Release (Read returns ErrReleased or ErrGone; a later Release is ignored).
//
// What Replay rebuilds: nothing about references is persisted. After Open
// every record on disk is referenced once, released or not before the
// crash. Replay hands them all in their original append order (a record
// copied by Compact comes at its original place, with its new Pos; if a
// crash left both a record and its copy, only one is handed and the other
// is already dead). The host rebuilds its state by applying the records in
// that order as it did when it appended them (last hard state wins, an
// entry at index i replaces the entries at i and above, a snapshot record
// drops the entries it covers), and Releases every record it does not keep,
// during or after Replay. Records released before the crash may or may not
// be handed (their segment may have been deleted), so the host must not
// depend on seeing a superseded record; it only sees records in the order
// they were appended, a subsequence that contains every record it had not
// released and that a Sync covered. A group deleted by the host may thus
// leave some of its records behind until their segments go. If its id can
// come back (a member removed, then added again), the host appends a
// tombstone record (Replay drops what came before it for that group) and
// keeps it until Stats().Oldest is after the Pos Append gave it (not a
// copy's): every record appended before the tombstone, and every copy of
// one, is then gone from the disk.
//
// Compact moves records, so positions change: the move callback tells the
// host each old and new Pos (with Group, Index, Term and Kind to find its
// entry). Until the next Compact, an old position still works (Read,
// Retain, Release follow it to the copy). The host calls Compact when
// Stats().Compactable > 0 (after a round of snapshots, say, or on a timer);
// it may run on another goroutine than the appends (it takes the writer
// lock only to append its copies and sync them), with move updating the
// host's index under the host's lock; then the host must record the
// positions Append returns under that same lock, in the same critical
// section as the Append (a concurrent Compact may move a record as soon as
// Append returns, if a roll sealed its segment meanwhile).
//
// # Durability
//
// Append copies records into a buffer (written to the head segment when it
// passes Options.BufferSize, on Sync, on a roll); they are readable at once
// and durable only after a Sync that started after the Append returned
// nil. Sync writes the buffer and issues one fdatasync of the head. When the
// head would pass Options.SegmentSize, it is written, fdatasynced and
// sealed, and the next segment is created and its directory entry synced:
// so every sealed segment is complete on disk, and only the last one can
// hold a torn tail. Compact syncs the copies before it deletes the
// originals. Segment deletions are made durable (directory fsync) before
// Stats().Oldest moves past them. A failed write or fdatasync fails
// the WAL: every later Append, Sync and Compact returns the error; reopen to
// recover (after a failed fdatasync the kernel may have dropped the pages,
// so nothing written since the last good sync is trusted).
//
// # Recovery
//
// Open reads and verifies every segment. In the last segment, the first
// frame that is incomplete, has an impossible length or fails its checksum
// is a torn tail: the file is cut there (logged at Warn); a header torn at
// creation resets the segment. This may cut records that followed a
// damaged one in the last segment; a crash cannot tell those from an
// unsynced tail written out of order, and only unsynced records (never
// acknowledged) can be cut by a crash. In any other segment, a bad frame or
// header can only be disk corruption (sealed segments were synced before
// the next one existed): Open refuses the log with a *CorruptError naming
// the segment and offset, rather than silently dropping records that Raft
// acknowledged (losing them could make this node vote twice or forget a
// committed entry). The operator then removes this node's qraft directory
// and re-adds the node's members from their peers.
//
// # Format
//
// Files wal-%016x.seg (segment numbers from 1, increasing, never reused
// while a higher one exists). A segment starts with an 8-byte header
// ("WQRW", version byte 1, three zero bytes) followed by frames:
//
//	u32 body length | u32 CRC-32C (Castagnoli) of the body | body
//	body: flags u8 | kind u8 | uvarint group | uvarint index | uvarint term
//	      | [u64 original Pos key, if flags&1: a copy made by Compact] | data
//
// little-endian. A record larger than a segment gets a segment of its own;
// Data is at most MaxDataSize. With Options.Preallocate the head is a
// zero-filled file of SegmentSize bytes written over (a frame length of 0
// ends the log; Open keeps those zeros, and cuts anything else after the
// last good frame); a roll cuts it to its frames; the next one is prepared
// in the background as wal-spare.tmp.
//
// # Concurrency and cost
//
// A WAL is safe for concurrent use. Append and Sync serialize on the writer
// lock (an Append waits for a Sync's fdatasync); Read, Retain, Release and
// Stats only take a short state lock, never held across I/O, so reads run
// during writes and fsyncs. Append costs one allocation per call (the
// positions) and one write(2) per Options.BufferSize bytes; Sync one
// pwrite of the buffer and one fdatasync; Read one allocation and one pread
// (or a copy from the buffer); Release a binary search in the segment's
// offsets. Compact reads the old segments through a 1 MiB window, appends
// the copies in batches, syncs once.
package wal
