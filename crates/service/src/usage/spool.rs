//! The spool: an append-only file of usage flushes that could not be written to the
//! database yet (`<data_dir>/usage-spool.jsonl`, one JSON [`UsageFlush`] per line).
//!
//! - [`Spool::append`] writes whole lines and calls `fsync` (`sync_data`) before it returns,
//!   so an appended flush survives a crash or a power cut.
//! - Replay first renames the file to `usage-spool.replaying.jsonl` (appends then start a new
//!   file), reads it in batches from an offset, and deletes it once every flush is in the
//!   database. Flushes are applied once by id, so replaying a file twice (a crash during
//!   replay) counts nothing twice.
//! - A line cut short by a crash mid-write is skipped; at open, a file that does not end with
//!   a newline gets one, so the fragment never merges with the next flush.
//! - A line holding a single usage record (the format of earlier versions) is read as a
//!   flush of that one call, with an id derived from its request id.
//!
//! Blocking file I/O: called from the recorder task only, never from a request.

use aigw_domain::ledger::{RollupKey, UsageFlush, UsageRollup, UsageSums};
use aigw_domain::usage::UsageRecord;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// File name of the spool in the data folder.
pub const SPOOL_FILE: &str = "usage-spool.jsonl";
/// File name of a spool being replayed.
pub const REPLAY_FILE: &str = "usage-spool.replaying.jsonl";

/// The spool files of one data folder.
#[derive(Debug)]
pub struct Spool {
    path: PathBuf,
    replay_path: PathBuf,
    file: Mutex<Option<File>>,
    records: AtomicU64,
    bytes: AtomicU64,
}

/// One batch read back from a spool file.
#[derive(Debug, Default)]
pub struct SpoolBatch {
    /// The flushes read.
    pub flushes: Vec<UsageFlush>,
    /// Where the next batch starts.
    pub next_offset: u64,
    /// Whether the file has no more records after this batch.
    pub at_end: bool,
    /// Lines that were not records (cut short by a crash): skipped.
    pub skipped: usize,
}

impl Spool {
    /// Opens the spool of `dir` (created if missing), counting the calls already spooled
    /// and closing a line cut short by a crash.
    ///
    /// # Errors
    /// When the folder cannot be created or a spool file cannot be read.
    pub fn open(dir: &Path) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let spool = Self {
            path: dir.join(SPOOL_FILE),
            replay_path: dir.join(REPLAY_FILE),
            file: Mutex::new(None),
            records: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        };
        for path in [&spool.path, &spool.replay_path] {
            let Ok(mut file) = OpenOptions::new().read(true).append(true).open(path) else {
                continue;
            };
            let (lines, len, ends_with_newline) = scan(&mut file)?;
            if !ends_with_newline {
                file.write_all(b"\n")?;
                file.sync_data()?;
            }
            spool.records.fetch_add(lines, Ordering::Relaxed);
            spool.bytes.fetch_add(len, Ordering::Relaxed);
        }
        Ok(spool)
    }

    /// Calls waiting in the spool files.
    pub fn records(&self) -> u64 {
        self.records.load(Ordering::Relaxed)
    }

    /// Bytes of the spool files.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, Option<File>> {
        self.file.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Appends `flush` as one whole line and syncs the file to disk.
    ///
    /// # Errors
    /// When the file cannot be opened, written or synced.
    pub fn append(&self, flush: &UsageFlush) -> io::Result<()> {
        if flush.is_empty() {
            return Ok(());
        }
        let mut buffer = serde_json::to_vec(flush).map_err(io::Error::other)?;
        buffer.push(b'\n');
        let mut guard = self.lock();
        if guard.is_none() {
            let file = OpenOptions::new().create(true).append(true).open(&self.path)?;
            sync_dir(&self.path);
            *guard = Some(file);
        }
        let Some(file) = guard.as_mut() else {
            return Err(io::Error::other("spool file not open"));
        };
        file.write_all(&buffer)?;
        file.sync_data()?;
        self.records.fetch_add(flush.calls(), Ordering::Relaxed);
        self.bytes.fetch_add(buffer.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// The file to replay: the one a previous replay left, else the spool itself, renamed
    /// so that new appends go to a fresh file. `None` when nothing is spooled.
    ///
    /// # Errors
    /// When the rename fails.
    pub fn take_for_replay(&self) -> io::Result<Option<PathBuf>> {
        if self.replay_path.exists() {
            return Ok(Some(self.replay_path.clone()));
        }
        let mut guard = self.lock();
        let has_records = std::fs::metadata(&self.path).is_ok_and(|m| m.len() > 0);
        if !has_records {
            return Ok(None);
        }
        *guard = None;
        std::fs::rename(&self.path, &self.replay_path)?;
        sync_dir(&self.replay_path);
        Ok(Some(self.replay_path.clone()))
    }

    /// Reads up to `max` flushes of `path` from byte `offset`.
    ///
    /// # Errors
    /// When the file cannot be read.
    pub fn read_batch(path: &Path, offset: u64, max: usize) -> io::Result<SpoolBatch> {
        let mut file = File::open(path)?;
        file.seek(SeekFrom::Start(offset))?;
        let mut reader = BufReader::new(file);
        let mut batch = SpoolBatch { next_offset: offset, ..SpoolBatch::default() };
        let mut line = Vec::new();
        while batch.flushes.len() < max {
            line.clear();
            let n = reader.read_until(b'\n', &mut line)?;
            if n == 0 {
                batch.at_end = true;
                break;
            }
            batch.next_offset += n as u64;
            match parse_line(&line) {
                Some(flush) => batch.flushes.push(flush),
                None if line.iter().all(u8::is_ascii_whitespace) => {}
                None => batch.skipped += 1,
            }
        }
        if !batch.at_end {
            batch.at_end = reader.fill_buf()?.is_empty();
        }
        Ok(batch)
    }

    /// Notes that `records` calls (and `bytes` bytes) of a replayed file are in the
    /// database.
    pub fn replayed(&self, records: u64, bytes: u64) {
        let sub = |counter: &AtomicU64, n: u64| {
            let _ = counter
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v.saturating_sub(n)));
        };
        sub(&self.records, records);
        sub(&self.bytes, bytes);
    }

    /// Deletes a fully replayed file.
    ///
    /// # Errors
    /// When it cannot be removed.
    pub fn finish_replay(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)?;
        sync_dir(path);
        Ok(())
    }
}

/// A spool line as a flush: a [`UsageFlush`], or a single record written by an earlier
/// version (a flush of that call, its id derived from the request id so that replaying it
/// twice counts it once). `None` for anything else (a line cut short).
fn parse_line(line: &[u8]) -> Option<UsageFlush> {
    if let Ok(flush) = serde_json::from_slice::<UsageFlush>(line) {
        return Some(flush);
    }
    let record = serde_json::from_slice::<UsageRecord>(line).ok()?;
    Some(UsageFlush {
        id: format!("record-{}", record.request_id),
        rollups: vec![UsageRollup { key: RollupKey::of(&record), sums: UsageSums::of(&record) }],
        records: vec![record],
        tracked: Vec::new(),
        keep_records: true,
    })
}

/// Counts the calls and bytes of `file` and tells whether it ends with a newline.
fn scan(file: &mut File) -> io::Result<(u64, u64, bool)> {
    file.seek(SeekFrom::Start(0))?;
    let mut reader = BufReader::new(file);
    let (mut calls, mut len, mut last) = (0u64, 0u64, b'\n');
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line)?;
        if n == 0 {
            break;
        }
        len += n as u64;
        last = line[n - 1];
        calls += parse_line(&line).map_or(0, |f| f.calls());
    }
    Ok((calls, len, last == b'\n'))
}

/// Syncs the folder holding `path`, so a created or renamed file survives a crash. Best
/// effort: not every file system allows it.
fn sync_dir(path: &Path) {
    if let Some(dir) = path.parent() {
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use aigw_domain::usage::{TokenUsage, UsageOutcome};

    fn record(id: &str) -> UsageRecord {
        UsageRecord {
            request_id: id.to_owned(),
            api_key_id: "k".into(),
            user_id: "u".into(),
            model: "m".into(),
            provider: "p".into(),
            served_model: None,
            attempts: 1,
            endpoint: aigw_domain::usage::Endpoint::Chat,
            streamed: false,
            outcome: UsageOutcome::Ok,
            tokens: TokenUsage::new(1, 2),
            estimated: false,
            cost_micros: 3,
            priced: true,
            latency_ms: 4,
            started_at: aigw_domain::time::now(),
            team_id: None,
            member_id: None,
        }
    }

    fn flush(id: &str, calls: &[&str]) -> UsageFlush {
        let records: Vec<UsageRecord> = calls.iter().map(|c| record(c)).collect();
        let mut sums = UsageSums::default();
        records.iter().for_each(|r| sums.add_record(r));
        UsageFlush {
            id: id.to_owned(),
            rollups: vec![UsageRollup { key: RollupKey::of(&records[0]), sums }],
            records,
            tracked: Vec::new(),
            keep_records: true,
        }
    }

    fn ids(batch: &SpoolBatch) -> Vec<&str> {
        batch.flushes.iter().map(|f| f.id.as_str()).collect()
    }

    #[test]
    fn appends_replays_and_skips_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path()).unwrap();
        spool.append(&flush("a", &["a1", "a2"])).unwrap();
        spool.append(&flush("b", &["b1"])).unwrap();
        assert_eq!(spool.records(), 3, "calls, not lines");
        drop(spool);
        // A crash mid-write leaves half a line; an earlier version left a record line.
        let mut f = OpenOptions::new().append(true).open(dir.path().join(SPOOL_FILE)).unwrap();
        serde_json::to_writer(&mut f, &record("old")).unwrap();
        f.write_all(b"\n{\"id\":\"c\",\"rollu").unwrap();
        drop(f);
        let spool = Spool::open(dir.path()).unwrap();
        assert_eq!(spool.records(), 4);
        spool.append(&flush("d", &["d1"])).unwrap();
        let path = spool.take_for_replay().unwrap().unwrap();
        spool.append(&flush("e", &["e1"])).unwrap();
        let first = Spool::read_batch(&path, 0, 2).unwrap();
        assert_eq!(ids(&first), ["a", "b"]);
        assert_eq!(first.flushes[0], flush("a", &["a1", "a2"]).with_times_of(&first.flushes[0]));
        assert!(!first.at_end);
        let rest = Spool::read_batch(&path, first.next_offset, 10).unwrap();
        assert_eq!(ids(&rest), ["record-old", "d"]);
        assert_eq!(rest.flushes[0].calls(), 1);
        assert_eq!(rest.skipped, 1);
        assert!(rest.at_end);
        spool.finish_replay(&path).unwrap();
        // The flush appended during the replay is in the new file.
        let next = spool.take_for_replay().unwrap().unwrap();
        let batch = Spool::read_batch(&next, 0, 10).unwrap();
        assert_eq!(ids(&batch), ["e"]);
    }

    trait WithTimes {
        fn with_times_of(self, other: &Self) -> Self;
    }
    impl WithTimes for UsageFlush {
        fn with_times_of(mut self, other: &Self) -> Self {
            for (mine, theirs) in self.records.iter_mut().zip(&other.records) {
                mine.started_at = theirs.started_at;
            }
            for (mine, theirs) in self.rollups.iter_mut().zip(&other.rollups) {
                mine.key.day = theirs.key.day;
            }
            self
        }
    }
}
