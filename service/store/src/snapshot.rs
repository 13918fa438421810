//! The persisted snapshot: what a snapshot's bytes contain and where the
//! current one is kept.

use std::fmt;
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use baton_core::StateMachine;
use rocksdb::DB;
use serde::{Deserialize, Serialize};

use crate::codec::{decode, encode};
use crate::db::{self, CF_SNAPSHOT, KEY_SNAPSHOT_FILE, KEY_SNAPSHOT_INLINE};
use crate::error::StoreError;
use crate::paced_sync::PacedSync;
use crate::shared::AppliedState;
use crate::type_config::{LogId, SnapshotMeta, StoredMembership};

/// How much of a snapshot file is written between syncs of its data, built
/// ([`PacedSync`]) or received (`ReceivingSync`): about a millisecond of this
/// disk's write bandwidth.
pub(crate) const SYNC_STEP_BYTES: u64 = 1 << 20;

/// What separates a snapshot id from the CRC-32 of its bytes
/// ([`SnapshotEnvelope::id_with_checksum`]).
const CHECKSUM_MARK: &str = ".crc32-";

/// The bytes of a snapshot, as sent to followers: self-describing, so a
/// receiver can check them against the meta it was given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SnapshotEnvelope {
    /// The last log entry the state covers.
    pub last_applied: Option<LogId>,
    /// The last membership the state covers.
    pub membership: StoredMembership,
    /// `baton_core::StateMachine::to_snapshot()` (which carries its own version).
    pub machine: Vec<u8>,
}

impl SnapshotEnvelope {
    /// Captures `applied` (serializing the state machine).
    #[cfg(test)]
    pub(crate) fn of(applied: &AppliedState) -> Self {
        SnapshotEnvelope {
            last_applied: applied.last_applied,
            membership: applied.membership.clone(),
            machine: applied.machine.to_snapshot(),
        }
    }

    #[cfg(test)]
    pub(crate) fn encode(&self) -> Result<Vec<u8>, StoreError> {
        encode("snapshot data", self)
    }

    /// Writes the bytes [`SnapshotEnvelope::encode`] would make of these parts,
    /// without first copying `machine` into an envelope: the format byte, the
    /// fields in order, and `machine` as postcard writes a byte vector (its
    /// length as a varint, then the bytes).
    /// Returns the CRC-32 of all the bytes written.
    pub(crate) fn write(
        last_applied: Option<&LogId>,
        membership: &StoredMembership,
        machine: &[u8],
        out: &mut impl Write,
    ) -> std::io::Result<u32> {
        let head = postcard::to_extend(
            &(last_applied, membership, machine.len()),
            vec![crate::codec::FORMAT_V1],
        )
        .map_err(std::io::Error::other)?;
        out.write_all(&head)?;
        out.write_all(machine)?;
        let mut checksum = crc32fast::Hasher::new();
        checksum.update(&head);
        checksum.update(machine);
        Ok(checksum.finalize())
    }

    /// `id` with the CRC-32 of the snapshot's bytes appended: the id travels to
    /// followers in openraft's meta, so a follower can check the bytes it
    /// received before it stores them, without a change to the file format
    /// (a build that does not know the suffix treats the id as opaque, as
    /// openraft does).
    pub(crate) fn id_with_checksum(id: &str, checksum: u32) -> String {
        format!("{id}{CHECKSUM_MARK}{checksum:08x}")
    }

    /// The CRC-32 `meta`'s snapshot id promises, if it carries one (snapshots
    /// of builds before the suffix do not).
    pub(crate) fn promised_checksum(meta: &SnapshotMeta) -> Option<u32> {
        let (_, hex) = meta.snapshot_id.rsplit_once(CHECKSUM_MARK)?;
        u32::from_str_radix(hex, 16).ok()
    }

    /// Checks received snapshot bytes before they are stored, without
    /// decoding the state: their beginning `head` and length `len` (see
    /// [`SnapshotEnvelope::check_head`]) and `checksum`, the CRC-32 of all of
    /// them, computed only when the id promises one
    /// ([`SnapshotEnvelope::promised_checksum`], then
    /// [`SnapshotEnvelope::check_checksum`]).
    pub(crate) fn check_received(
        meta: &SnapshotMeta,
        head: &[u8],
        len: u64,
        checksum: Option<u32>,
    ) -> Result<(), StoreError> {
        Self::check_head(meta, head, len)?;
        match checksum {
            Some(actual) => Self::check_checksum(meta, actual),
            None => Ok(()),
        }
    }

    /// Checks `actual`, the CRC-32 of received bytes, against what `meta`'s
    /// id promises (nothing to check for an id without one).
    pub(crate) fn check_checksum(meta: &SnapshotMeta, actual: u32) -> Result<(), StoreError> {
        match Self::promised_checksum(meta) {
            Some(expected) if expected != actual => {
                Err(StoreError::SnapshotChecksum { expected, actual })
            }
            _ => Ok(()),
        }
    }

    /// Checks what can be checked of snapshot bytes without decoding the
    /// state: `head` is their beginning (at least the envelope's fields),
    /// `len` their total length. They must be this build's envelope format,
    /// cover the log up to where `meta` says, be exactly as long as the
    /// envelope says (a cut-off or overlong transfer is refused here) and hold
    /// a state format this build reads. Returns where the state's bytes begin.
    pub(crate) fn check_head(
        meta: &SnapshotMeta,
        head: &[u8],
        len: u64,
    ) -> Result<usize, StoreError> {
        const WHAT: &str = "snapshot data";
        let body = crate::codec::body_of(WHAT, head)?;
        let ((last_applied, _membership, machine_len), rest): (
            (Option<LogId>, StoredMembership, u64),
            &[u8],
        ) = postcard::take_from_bytes(body)
            .map_err(|source| StoreError::Decode { what: WHAT, source })?;
        if last_applied != meta.last_log_id {
            return Err(StoreError::SnapshotMismatch {
                meta: format!("{:?}", meta.last_log_id),
                data: format!("{:?}", last_applied),
            });
        }
        let start = head.len() - rest.len();
        let expected = (start as u64).saturating_add(machine_len);
        if expected != len {
            return Err(StoreError::SnapshotSize {
                expected,
                actual: len,
            });
        }
        match rest.first() {
            Some(&format) if StateMachine::reads_snapshot_format(format) => Ok(start),
            Some(&format) => Err(StoreError::Restore(
                baton_core::SnapshotError::UnsupportedFormat(format),
            )),
            None => Err(StoreError::Restore(baton_core::SnapshotError::Empty)),
        }
    }

    /// Rebuilds the applied state from a whole snapshot's bytes, checked
    /// against `meta` (which is trusted for the Raft bookkeeping). The state is
    /// decoded where it lies in `data`, not copied out of the envelope first.
    pub(crate) fn restore(meta: &SnapshotMeta, data: &[u8]) -> Result<AppliedState, StoreError> {
        let start = Self::check_head(meta, data, data.len() as u64)?;
        let machine = StateMachine::from_snapshot(&data[start..]).map_err(StoreError::Restore)?;
        Ok(AppliedState {
            machine,
            last_applied: meta.last_log_id,
            membership: meta.last_membership.clone(),
        })
    }
}

/// The current snapshot as older builds stored it: meta and data under one
/// key of the `snapshot` column family ([`KEY_SNAPSHOT_INLINE`]). Read once, to
/// move it into a file, when such a data directory is opened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StoredSnapshot {
    /// This node's sequence number for snapshots it built or installed; it only
    /// keeps snapshot ids unique across restarts.
    pub seq: u64,
    /// openraft's description of the snapshot.
    pub meta: SnapshotMeta,
    /// The encoded [`SnapshotEnvelope`].
    pub data: Vec<u8>,
}

/// The current snapshot's record in the `snapshot` column family: openraft's
/// meta and the file, in the snapshot directory, that holds its bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SnapshotRecord {
    /// This node's sequence number for snapshots it built or installed; it only
    /// keeps snapshot ids and file names unique across restarts.
    pub seq: u64,
    /// openraft's description of the snapshot.
    pub meta: SnapshotMeta,
    /// The file's name in the snapshot directory.
    pub file: String,
}

/// Reads and replaces the one current snapshot.
///
/// # Why a file and not a RocksDB value
///
/// A snapshot of a million holdings is over a hundred megabytes. Written as one
/// RocksDB value it went through the write-ahead log that every log append also
/// waits on, so appends queued behind it for as long as the write and its sync
/// took (a second and more in `make bench-scale`), and it was encoded a second
/// time to wrap it with its meta. Now its bytes are streamed to a file of their
/// own, synced and renamed into place; only the small [`SnapshotRecord`] goes
/// through RocksDB. The file's bytes are exactly what followers are sent.
pub(crate) struct SnapshotStore {
    db: Arc<DB>,
    durability: crate::Durability,
    dir: PathBuf,
    /// The current snapshot's record, behind the lock that serializes "compare
    /// with the stored snapshot, then replace it": a snapshot build runs in its
    /// own task and may finish after a newer snapshot was installed.
    current: Mutex<Option<SnapshotRecord>>,
    seq: AtomicU64,
}

impl fmt::Debug for SnapshotStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnapshotStore")
            .field("dir", &self.dir)
            .field("seq", &self.seq.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl SnapshotStore {
    /// Opens the store in `dir` (created if missing) and returns the current
    /// snapshot's record, if any. A snapshot stored inline by an older build is
    /// moved into a file first; files that belong to no record (a crash
    /// between writing and recording) are removed.
    pub(crate) fn open(
        db: Arc<DB>,
        dir: PathBuf,
        durability: crate::Durability,
    ) -> Result<(Self, Option<SnapshotRecord>), StoreError> {
        std::fs::create_dir_all(&dir).map_err(|source| StoreError::CreateDir {
            path: dir.clone(),
            source,
        })?;
        let store = SnapshotStore {
            db,
            durability,
            dir,
            current: Mutex::new(None),
            seq: AtomicU64::new(0),
        };
        let mut current = store.load_record()?;
        if current.is_none() {
            current = store.migrate_inline()?;
        }
        if let Some(record) = &current {
            store.seq.store(record.seq, Ordering::Relaxed);
        }
        store.remove_strays(current.as_ref())?;
        *store.current() = current.clone();
        Ok((store, current))
    }

    fn load_record(&self) -> Result<Option<SnapshotRecord>, StoreError> {
        let cf = db::cf(&self.db, CF_SNAPSHOT)?;
        match self.db.get_pinned_cf(cf, KEY_SNAPSHOT_FILE)? {
            Some(bytes) => Ok(Some(decode("snapshot record", &bytes)?)),
            None => Ok(None),
        }
    }

    /// Moves an inline snapshot of an older build into a file.
    fn migrate_inline(&self) -> Result<Option<SnapshotRecord>, StoreError> {
        let cf = db::cf(&self.db, CF_SNAPSHOT)?;
        let Some(bytes) = self.db.get_pinned_cf(cf, KEY_SNAPSHOT_INLINE)? else {
            return Ok(None);
        };
        let inline: StoredSnapshot = decode("stored snapshot", &bytes)?;
        drop(bytes);
        self.seq.store(inline.seq, Ordering::Relaxed);
        let (seq, _) = self.next_id(inline.meta.last_log_id.as_ref());
        let staged = self.write_staged(seq, |out| out.write_all(&inline.data))?;
        self.commit(seq, &inline.meta, &staged, false)?;
        self.db.delete_cf_opt(
            cf,
            KEY_SNAPSHOT_INLINE,
            &db::write_options(self.durability, true),
        )?;
        tracing::info!(snapshot = %inline.meta, "moved the stored snapshot into a file");
        self.load_record()
    }

    fn remove_strays(&self, current: Option<&SnapshotRecord>) -> Result<(), StoreError> {
        let entries = std::fs::read_dir(&self.dir).map_err(|source| self.io(&self.dir, source))?;
        for entry in entries {
            let entry = entry.map_err(|source| self.io(&self.dir, source))?;
            let name = entry.file_name();
            if current.is_some_and(|record| name.to_str() == Some(record.file.as_str())) {
                continue;
            }
            let path = entry.path();
            std::fs::remove_file(&path).map_err(|source| self.io(&path, source))?;
        }
        Ok(())
    }

    /// The current snapshot's meta, its file's path and the file, opened for
    /// reading.
    pub(crate) fn open_current(&self) -> Result<Option<(SnapshotMeta, PathBuf, File)>, StoreError> {
        // The lock is held while opening, so the file is not replaced in
        // between; once open, a replaced (unlinked) file stays readable.
        let current = self.current();
        let Some(record) = current.as_ref() else {
            return Ok(None);
        };
        let path = self.dir.join(&record.file);
        let file = File::open(&path).map_err(|source| self.io(&path, source))?;
        Ok(Some((record.meta.clone(), path, file)))
    }

    /// The current snapshot's meta and bytes.
    pub(crate) fn read_current(&self) -> Result<Option<(SnapshotMeta, Vec<u8>)>, StoreError> {
        let Some((meta, path, mut file)) = self.open_current()? else {
            return Ok(None);
        };
        let mut data = Vec::new();
        file.read_to_end(&mut data)
            .map_err(|source| self.io(&path, source))?;
        Ok(Some((meta, data)))
    }

    /// A fresh sequence number and the snapshot id to go with it.
    pub(crate) fn next_id(&self, last_log_id: Option<&LogId>) -> (u64, String) {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let id = match last_log_id {
            Some(log_id) => format!("{}-{}-{}", log_id.leader_id.term, log_id.index, seq),
            None => format!("none-{seq}"),
        };
        (seq, id)
    }

    /// Whether snapshot files are synced (synced durability).
    pub(crate) fn syncs(&self) -> bool {
        self.durability.syncs()
    }

    /// A new, empty file for a snapshot being received from the leader.
    pub(crate) fn receiving_file(&self) -> Result<(PathBuf, File), StoreError> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let path = self.dir.join(format!("receiving-{seq}.tmp"));
        let file = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|source| self.io(&path, source))?;
        Ok((path, file))
    }

    /// Streams `applied`'s snapshot bytes into a staged file: the state
    /// machine is encoded once, and its envelope is written around it without
    /// another copy. Returns the file and the CRC-32 of its bytes.
    pub(crate) fn stage_built(
        &self,
        seq: u64,
        applied: &AppliedState,
    ) -> Result<(PathBuf, u32), StoreError> {
        let machine = applied.machine.to_snapshot();
        let mut checksum = 0;
        let staged = self.write_staged(seq, |out| {
            checksum = SnapshotEnvelope::write(
                applied.last_applied.as_ref(),
                &applied.membership,
                &machine,
                out,
            )?;
            Ok(())
        })?;
        Ok((staged, checksum))
    }

    /// Writes snapshot bytes into a staged file.
    pub(crate) fn stage_bytes(&self, seq: u64, data: &[u8]) -> Result<PathBuf, StoreError> {
        self.write_staged(seq, |out| out.write_all(data))
    }

    /// Makes a fully received file ready to be committed as it is: synced
    /// (with synced durability), since its chunks were written without syncs.
    pub(crate) fn adopt_received(&self, path: PathBuf) -> Result<PathBuf, StoreError> {
        if self.durability.syncs() {
            File::open(&path)
                .and_then(|file| file.sync_all())
                .map_err(|source| self.io(&path, source))?;
        }
        Ok(path)
    }

    fn write_staged(
        &self,
        seq: u64,
        write: impl FnOnce(&mut BufWriter<PacedSync>) -> std::io::Result<()>,
    ) -> Result<PathBuf, StoreError> {
        let path = self.dir.join(format!("staged-{seq}.tmp"));
        let synced = self.durability.syncs();
        let result = (|| {
            let step = if synced { SYNC_STEP_BYTES } else { 0 };
            let file = PacedSync::new(File::create(&path)?, step);
            let mut out = BufWriter::with_capacity(1 << 20, file);
            write(&mut out)?;
            out.into_inner()
                .map_err(std::io::IntoInnerError::into_error)?
                .finish(synced)?;
            Ok(())
        })();
        result.map_err(|source| {
            let _ = std::fs::remove_file(&path);
            self.io(&path, source)
        })?;
        Ok(path)
    }

    /// Makes the staged file the current snapshot, described by `meta`, synced.
    /// With `only_if_newer`, a stored snapshot covering more of the log is kept
    /// instead, the staged file removed and `false` returned.
    pub(crate) fn commit(
        &self,
        seq: u64,
        meta: &SnapshotMeta,
        staged: &Path,
        only_if_newer: bool,
    ) -> Result<bool, StoreError> {
        let mut current = self.current();
        let stored_last_log_id = current.as_ref().and_then(|record| record.meta.last_log_id);
        if only_if_newer && current.is_some() && stored_last_log_id > meta.last_log_id {
            std::fs::remove_file(staged).map_err(|source| self.io(staged, source))?;
            return Ok(false);
        }
        let record = SnapshotRecord {
            seq,
            meta: meta.clone(),
            file: format!("snapshot-{seq}.bin"),
        };
        let path = self.dir.join(&record.file);
        std::fs::rename(staged, &path).map_err(|source| self.io(&path, source))?;
        if self.durability.syncs() {
            File::open(&self.dir)
                .and_then(|dir| dir.sync_all())
                .map_err(|source| self.io(&self.dir, source))?;
        }
        let cf = db::cf(&self.db, CF_SNAPSHOT)?;
        let opts = db::write_options(self.durability, true);
        self.db.put_cf_opt(
            cf,
            KEY_SNAPSHOT_FILE,
            encode("snapshot record", &record)?,
            &opts,
        )?;
        if let Some(replaced) = current.replace(record) {
            let old = self.dir.join(replaced.file);
            std::fs::remove_file(&old).map_err(|source| self.io(&old, source))?;
        }
        Ok(true)
    }

    fn current(&self) -> MutexGuard<'_, Option<SnapshotRecord>> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn io(&self, path: &Path, source: std::io::Error) -> StoreError {
        StoreError::SnapshotFile {
            path: path.to_path_buf(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use baton_core::{ApplyContext, Command, LeaseId, Limits, Request};
    use openraft::{CommittedLeaderId, Membership};
    use tempfile::TempDir;

    use super::*;

    fn applied() -> AppliedState {
        let mut machine = StateMachine::new();
        let ctx = ApplyContext {
            now_ms: 1_000,
            limits: Limits::default(),
            term: 1,
        };
        for i in 0..3 {
            machine.apply(
                &ctx,
                &Request::plain(Command::CreateLease {
                    lease_id: LeaseId(i),
                    ttl_ms: 10_000,
                    holder: format!("holder-{i}"),
                }),
            );
        }
        let log_id = LogId::new(CommittedLeaderId::new(2, 1), 9);
        AppliedState {
            machine,
            last_applied: Some(log_id),
            membership: StoredMembership::new(
                Some(log_id),
                Membership::new(vec![[1, 2, 3].into()], ()),
            ),
        }
    }

    fn meta_of(applied: &AppliedState, id: &str) -> SnapshotMeta {
        SnapshotMeta {
            last_log_id: applied.last_applied,
            last_membership: applied.membership.clone(),
            snapshot_id: id.to_owned(),
        }
    }

    #[test]
    fn written_parts_are_the_encoded_envelope() {
        let applied = applied();
        let mut written = Vec::new();
        let checksum = SnapshotEnvelope::write(
            applied.last_applied.as_ref(),
            &applied.membership,
            &applied.machine.to_snapshot(),
            &mut written,
        )
        .unwrap();
        assert_eq!(written, SnapshotEnvelope::of(&applied).encode().unwrap());
        assert_eq!(checksum, crc32fast::hash(&written));

        // The id carries it; a follower checks received bytes against it, and
        // an id without one (an older leader) promises nothing.
        let mut meta = meta_of(&applied, "2-9-4");
        assert_eq!(SnapshotEnvelope::promised_checksum(&meta), None);
        SnapshotEnvelope::check_checksum(&meta, 1).unwrap();
        meta.snapshot_id = SnapshotEnvelope::id_with_checksum("2-9-4", checksum);
        assert_eq!(SnapshotEnvelope::promised_checksum(&meta), Some(checksum));
        SnapshotEnvelope::check_checksum(&meta, checksum).unwrap();
        let mut corrupt = written.clone();
        *corrupt.last_mut().unwrap() ^= 1;
        assert!(matches!(
            SnapshotEnvelope::check_checksum(&meta, crc32fast::hash(&corrupt)),
            Err(StoreError::SnapshotChecksum { .. })
        ));
    }

    #[test]
    fn an_inline_snapshot_of_an_older_build_moves_into_a_file() {
        let dir = TempDir::new().unwrap();
        let applied = applied();
        let meta = meta_of(&applied, "2-9-4");
        let data = SnapshotEnvelope::of(&applied).encode().unwrap();
        {
            let db = db::open_db(dir.path(), 0).unwrap();
            let inline = StoredSnapshot {
                seq: 4,
                meta: meta.clone(),
                data: data.clone(),
            };
            db.put_cf(
                db::cf(&db, CF_SNAPSHOT).unwrap(),
                KEY_SNAPSHOT_INLINE,
                encode("stored snapshot", &inline).unwrap(),
            )
            .unwrap();
        }
        let db = db::open_db(dir.path(), 0).unwrap();
        let snapshots = dir.path().join("snapshots");
        let (store, record) =
            SnapshotStore::open(db.clone(), snapshots.clone(), crate::Durability::Synced).unwrap();
        let record = record.unwrap();
        assert_eq!(record.meta, meta);
        assert!(record.seq > 4, "sequence numbers continue: {}", record.seq);
        assert_eq!(store.read_current().unwrap(), Some((meta.clone(), data)));
        let inline = db
            .get_cf(db::cf(&db, CF_SNAPSHOT).unwrap(), KEY_SNAPSHOT_INLINE)
            .unwrap();
        assert_eq!(inline, None, "the inline copy is removed");
        let files: Vec<_> = std::fs::read_dir(&snapshots)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(files, vec![record.file]);
    }

    #[test]
    fn a_replaced_snapshot_file_and_leftovers_are_removed() {
        let dir = TempDir::new().unwrap();
        let snapshots = dir.path().join("snapshots");
        let db = db::open_db(dir.path(), 0).unwrap();
        let applied = applied();
        {
            let (store, _) =
                SnapshotStore::open(db.clone(), snapshots.clone(), crate::Durability::Synced)
                    .unwrap();
            for _ in 0..2 {
                let (seq, id) = store.next_id(applied.last_applied.as_ref());
                let (staged, _) = store.stage_built(seq, &applied).unwrap();
                assert!(store
                    .commit(seq, &meta_of(&applied, &id), &staged, true)
                    .unwrap());
            }
            // A crash while receiving leaves a file behind.
            store.receiving_file().unwrap();
            assert_eq!(std::fs::read_dir(&snapshots).unwrap().count(), 2);
        }
        let (store, record) =
            SnapshotStore::open(db, snapshots.clone(), crate::Durability::Synced).unwrap();
        let names: Vec<_> = std::fs::read_dir(&snapshots)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, vec![record.unwrap().file]);
        let (meta, data) = store.read_current().unwrap().unwrap();
        let restored = SnapshotEnvelope::restore(&meta, &data).unwrap();
        assert_eq!(restored.machine, applied.machine);
    }
}
